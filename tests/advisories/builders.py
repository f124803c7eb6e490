"""Rules with an `[advisories]` table whose feed has loaded a fixture export, for the tests.

The export's mtime is set to a moment the test chooses (the data's age for a local source is
measured from it), so staleness is a matter of arithmetic, not of waiting.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mirrorgate.rules import Rules, parse_rules
from tests.advisories.records import fixture_records, write_zip
from tests.rules.builders import NOW

__all__ = ["advisory_rules", "touch"]


def touch(path: Path, moment: datetime) -> None:
    os.utime(path, (moment.timestamp(), moment.timestamp()))


def advisory_rules(tmp_path: Path, table: str = "", *, extra: str = "",
                   records: Iterable[Mapping[str, Any]] | None = None,
                   modified: datetime = NOW - timedelta(hours=1), load: bool = True) -> Rules:
    """Rules whose `[advisories]` source is a zip of `records` (the fixture export by default),
    loaded once unless `load` is False. `table` holds extra keys for the table, `extra` more
    tables."""
    export = write_zip(tmp_path / "osv-npm.zip",
                       fixture_records() if records is None else records)
    touch(export, modified)
    rules = parse_rules(f'[advisories]\nsource = "{export}"\n{table}\n{extra}',
                        str(tmp_path / "rules.toml"))
    assert rules.advisories is not None
    if load:
        assert rules.advisories.feed.load_blocking() == "loaded"
    return rules
