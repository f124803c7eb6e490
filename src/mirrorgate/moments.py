"""The one reading of a registry time: `time[version]`, a mirror mark's, a job's `published`.

Registries write ISO 8601 with a zone (npm: `2024-01-02T03:04:05.678Z`); a time without one is
read as UTC, everywhere, so the age rule, the moment a denial ends and the time a job carries
can never disagree about the same text.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime

from mirrorgate.errors import MirrorgateError

__all__ = ["EARLIEST", "LATEST", "MAX_TIME_TEXT", "TimeTextError", "iso_now", "moment",
           "read_moment", "stamp", "time_text"]

MAX_TIME_TEXT = 64
"""Longer than any ISO 8601 time: text this long is not one, and is not parsed."""
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
"""The times read: no registry published before 1970, and a time this far from the ends of
Python's calendar (years 1 and 9999) survives every sum the rules make with it (an age, a
quarantine, ten years of minimum age) and every offset a zone can carry, which at the ends
overflows (`0001-01-01T00:00:00+01:00` is no UTC time)."""


class TimeTextError(MirrorgateError, ValueError):
    """Text that is no time mirrorgate reads: the message says why."""


def read_moment(text: str) -> datetime:
    """`text` (ISO 8601) as an aware UTC datetime, or TimeTextError saying why it is not one.
    A time without a zone is UTC (npm's registry always writes one; older documents and other
    registries sometimes do not)."""
    if len(text) > MAX_TIME_TEXT:
        raise TimeTextError(f"is {len(text)} characters, longer than any ISO 8601 time")
    try:
        when = datetime.fromisoformat(text.strip())
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except OverflowError:  # a zone's offset past the ends of the calendar
        raise TimeTextError("is past the ends of the calendar once its zone's offset is "
                            "applied") from None
    except ValueError:
        raise TimeTextError("is not a date or time (ISO 8601)") from None
    if not EARLIEST <= when < LATEST:
        raise TimeTextError(f"is outside the times mirrorgate reads ({stamp(EARLIEST)} to "
                            f"{stamp(LATEST)})")
    return when


MOMENTS_KEPT = 8192
"""Times `moment` keeps read, the most recently used: one packument's are read several times
over (its first publish, the takeover history, the baseline walk's order, the merged `time`),
and the largest lists a few thousand. About 2 MiB at most (short texts only are kept)."""


def moment(text: object) -> datetime | None:
    """`text` as an aware UTC datetime (`read_moment`); None when it is not a string holding
    a time mirrorgate reads. From an upstream, None is "no time": never an error answer."""
    if not isinstance(text, str):
        return None
    if len(text) > MAX_TIME_TEXT:
        return None  # no time (`read_moment`), and never a key of the kept ones
    return _moment_of(text)


@functools.lru_cache(maxsize=MOMENTS_KEPT)
def _moment_of(text: str) -> datetime | None:
    """`moment` of a text short enough to be a time, kept: a datetime is immutable."""
    try:
        return read_moment(text)
    except TimeTextError:
        return None


def time_text(value: object) -> str | None:
    """`value` when `moment` can read it (kept as written), else None."""
    return value if isinstance(value, str) and moment(value) is not None else None


def iso_now(now: datetime) -> str:
    """`now` as a registry writes a time: `2026-12-01T20:29:49.123Z`."""
    return now.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def stamp(when: datetime) -> str:
    """A moment as a person reads it in a reason: `2026-12-01T20:29:49Z`."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
