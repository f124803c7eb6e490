"""The facts of the files mirrorgate kept before the state store, imported once into it.

Until the state store, MIRRORGATE_DATA_DIR held three append-only files of `+key<TAB>value`
and `-key` lines: `first-party-names`, `withdrawn-versions` and `installed-names`. At the first
start on a store (`facts.IMPORTED` not yet set in it) they are replayed and written, so an
operator upgrading loses nothing; they are read no more after, and may be deleted.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import structlog

from mirrorgate.store import FIRST_PARTY, INSTALLED, WITHDRAWN, Fact, Store

__all__ = ["FILES", "import_files", "read_file"]

log = structlog.get_logger("mirrorgate.store")

FILES = {"first-party-names": FIRST_PARTY, "withdrawn-versions": WITHDRAWN,
         "installed-names": INSTALLED}
_MAX_LINE = 400  # as the files were written: longer lines were never facts


def read_file(path: Path) -> dict[str, str]:
    """The facts a file held at its end (its lines replayed in order); {} when there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    found: dict[str, str] = {}
    for raw in data.splitlines():
        if len(raw) > _MAX_LINE or len(raw) < 2:
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        key, _, value = line[1:].partition("\t")
        if not key:
            continue
        if line[0] == "+":
            found[key] = value
        elif line[0] == "-":
            found.pop(key, None)
    return found


async def import_files(data_dir: Path, store: Store) -> int:
    """Write every fact the files under `data_dir` hold into `store`; how many there were.
    A file that cannot be read is logged (`store_import_unreadable`) and skipped."""
    facts: list[Fact] = []
    for filename, kind in FILES.items():
        path = data_dir / filename
        try:
            held = await asyncio.to_thread(read_file, path)
        except OSError as error:
            log.warning("store_import_unreadable", path=str(path),
                        detail=error.strerror or type(error).__name__)
            continue
        facts += [Fact(kind, key, value) for key, value in held.items()]
    await store.put_facts(facts)
    return len(facts)
