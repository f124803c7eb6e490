"""The data directory's memory that it held a state store, kept outside the store itself.

An empty store is created at a first start; an emptied one (a 0-byte `state.sqlite3` after a
restore gone wrong, a volume or a database re-created) looks the same from inside, and taking it
for a first start would forget every withdrawal, first-party name, refusal and waiver. A marker
in MIRRORGATE_DATA_DIR, written once a store is open, tells them apart: where it names the
store, an empty one is refused (docs/state-store.md#an-empty-store).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import orjson
import structlog

__all__ = ["MARKER", "held_since", "refusal", "remember"]

log = structlog.get_logger("mirrorgate.store")

MARKER = "state-store.held"
"""JSON: the stores this directory's processes have used (file, or URL without its
password) -> when first opened."""


def _read(data_dir: Path) -> dict[str, str]:
    try:
        held = orjson.loads((data_dir / MARKER).read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, orjson.JSONDecodeError):
        # unreadable is not "never held": refuse an empty store rather than guess
        return {"": "an unreadable marker"}
    return ({str(key): str(value) for key, value in held.items()}
            if isinstance(held, dict) else {"": "an unreadable marker"})


def held_since(data_dir: Path, where: str) -> str | None:
    """When this data directory first opened the store at `where` (None: it never did)."""
    held = _read(data_dir)
    return held.get(where) or held.get("")


def remember(data_dir: Path, where: str) -> None:
    """Note that the store at `where` is open and holds what the gate learns (once; written
    whole, then renamed into place). A directory that cannot be written is logged, not
    fatal: the store still works, without this guard."""
    held = _read(data_dir)
    if where in held:
        return
    held.pop("", None)
    held[where] = datetime.now(UTC).isoformat(timespec="seconds")
    path = data_dir / MARKER
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_bytes(orjson.dumps(held, option=orjson.OPT_INDENT_2))
        os.replace(partial, path)
    except OSError as error:
        log.warning("store_marker_unwritten", path=str(path), reason=str(error),
                    consequence="an emptied store would be taken for a first start")


def refusal(data_dir: Path, where: str) -> str | None:
    """The message refusing an empty store at `where`, when this data directory held it."""
    since = held_since(data_dir, where)
    if since is None:
        return None
    return (f"the state store at {where} is empty, but this data directory ({data_dir}) has "
            f"held it since {since}: it was emptied, deleted or re-created (a restore gone "
            "wrong, a volume or database re-created), and starting on it would forget every "
            "withdrawal, first-party name, refusal and waiver it held. Restore it from a "
            f"backup; or, to start afresh on purpose, delete {data_dir / MARKER} and start "
            "again")
