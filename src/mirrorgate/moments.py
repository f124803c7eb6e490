"""The one reading of a registry time: `time[version]`, a mirror mark's, a job's `published`.

Registries write ISO 8601 with a zone (npm: `2024-01-02T03:04:05.678Z`); a time without one is
read as UTC, everywhere, so the age rule, the moment a denial ends and the time a job carries
can never disagree about the same text.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["MAX_TIME_TEXT", "iso_now", "moment", "stamp", "time_text"]

MAX_TIME_TEXT = 64
"""Longer than any ISO 8601 time: text this long is not one, and is not parsed."""


def moment(text: object) -> datetime | None:
    """`text` as an aware UTC datetime; None when it is not a string holding an ISO 8601 time.
    A time without a zone is UTC (npm's registry always writes one; older documents and other
    registries sometimes do not)."""
    if not isinstance(text, str) or len(text) > MAX_TIME_TEXT:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def time_text(value: object) -> str | None:
    """`value` when `moment` can read it (kept as written), else None."""
    return value if isinstance(value, str) and moment(value) is not None else None


def iso_now(now: datetime) -> str:
    """`now` as a registry writes a time: `2026-12-01T20:29:49.123Z`."""
    return now.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def stamp(when: datetime) -> str:
    """A moment as a person reads it in a reason: `2026-12-01T20:29:49Z`."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
