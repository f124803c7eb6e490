"""Waivers: exceptions an operator grants with `mirrorgate allow`, kept in the state store.

A waiver is a fact of kind `waiver` (key `name@version`, value its JSON), so it rides the
store's change feed like every other fact (every replica holds it within a poll) and a revoke is
a tombstone every replica follows; no table or migration of its own. The gate applies a waiver
as a rules file `[[exception]]` (`Waiver.exception`) for exactly the version and the bytes it
names: docs/serving.md#exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import orjson

from mirrorgate.errors import MirrorgateError
from mirrorgate.integrity import parse_integrity, strongest_sri
from mirrorgate.moments import TimeTextError, moment, read_moment, stamp
from mirrorgate.npm.names import InvalidNameError, parse_name
from mirrorgate.npm.versions import parse_version
from mirrorgate.rules import RuleException
from mirrorgate.rules.patterns import PatternList, parse_pattern
from mirrorgate.store.records import Fact, Store

__all__ = ["EXAMPLE", "UNBOUND", "WAIVER", "Waiver", "WaiverError", "parse_bytes",
           "parse_subject", "parse_until", "stored_waivers"]

WAIVER = "waiver"
"""The fact kind: key `name@version`, value the waiver's JSON (None: revoked)."""
EXAMPLE = ('mirrorgate allow left-pad@1.3.1 --why "the fix for CVE-2026-1234" '
           "--until 2027-01-31 --by alice")
_PAGE = 10_000
MAX_WHY = 500  # a reason is a sentence; the status page and a chat line show it whole
UNBOUND = ("kept before waivers named their bytes: it admits nothing; grant it again to name "
           "them")
"""What a waiver without an integrity (written by an earlier release) does now, said where it
is listed."""


class WaiverError(MirrorgateError, ValueError):
    """Input a waiver cannot be made of: the message says what is wrong; the command adds the
    example."""


@dataclass(frozen=True, slots=True)
class Waiver:
    """`name@version` (exactly: build metadata included) with the bytes `integrity` names,
    admitted past every policy rule until `until`, because `by` said `why`."""

    name: str
    version: str
    by: str
    why: str
    until: datetime
    granted: datetime
    integrity: str = ""
    """The bytes admitted (`integrity.strongest_sri` of what the operator saw listed); ""
    for a waiver an earlier release kept, which names none and so admits nothing: the bytes
    listed under its version may have changed since, and no one looked at these."""

    @property
    def subject(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def bound(self) -> bool:
        """Whether it names the bytes it admits (one kept before they were named does not)."""
        return bool(self.integrity)

    def active(self, now: datetime) -> bool:
        return now < self.until

    def fact(self) -> Fact:
        return Fact(WAIVER, self.subject, orjson.dumps({
            "by": self.by, "why": self.why, "until": stamp(self.until),
            "granted": stamp(self.granted), "integrity": self.integrity}).decode())

    @classmethod
    def from_fact(cls, key: str, value: str) -> Waiver | None:
        """The waiver a stored fact holds; None for one this release cannot read (skipped, not
        fatal: a newer release may write more)."""
        try:
            held = orjson.loads(value)
            name, version = parse_subject(key)
            until, granted = moment(held["until"]), moment(held["granted"])
            if until is None or granted is None:
                return None
            # none kept (an earlier release's waiver): unbound, admitting nothing
            integrity = held.get("integrity")
            return cls(name, version, str(held["by"]), str(held["why"]), until, granted,
                       integrity if isinstance(integrity, str) else "")
        except (orjson.JSONDecodeError, KeyError, TypeError, WaiverError):
            return None

    def exception(self) -> RuleException:
        """This waiver as the rules file's `[[exception]]` for exactly this version and these
        bytes, lifting every policy rule: the gate applies both the same way."""
        return RuleException(PatternList.of((parse_pattern(self.subject),)), self.until,
                             self.why, self.by, waiver=True, version=self.version,
                             integrity=self.integrity)

    def shown(self) -> dict[str, str]:
        return {"package": self.subject, "integrity": self.integrity, "by": self.by,
                "why": self.why, "until": stamp(self.until), "granted": stamp(self.granted)}


def parse_subject(text: str) -> tuple[str, str]:
    """`name@version` (one exact version: a waiver is granted for what was looked at)."""
    at = text.find("@", 1)  # a scope's own @ is the first character
    if at == -1 or not text[at + 1:]:
        raise WaiverError(f"{text!r} names no version; a waiver is for one exact version, "
                          "NAME@VERSION")
    name, version = text[:at], text[at + 1:]
    try:
        parse_name(name)
    except InvalidNameError as error:
        raise WaiverError(f"{name!r} is not a name npm accepts: {error}") from None
    if parse_version(version) is None:
        raise WaiverError(f"{version!r} is not an exact version (a range or a tag cannot be "
                          "waived; name the version, as 1.3.1)")
    return name, version


def parse_bytes(text: str) -> str:
    """`--integrity`: an SRI string (`sha512-...`, as a lockfile, `npm view NAME@VERSION
    dist.integrity` or a 403 shows it) as the bytes a waiver names (its strongest digest)."""
    chosen = strongest_sri(parse_integrity(text))
    if not chosen:
        raise WaiverError(f"--integrity {text[:120]!r} is not an SRI digest mirrorgate can "
                          "verify; give the version's dist.integrity, as sha512-...")
    return chosen


def parse_until(text: str, now: datetime) -> datetime:
    """A date (its midnight UTC) or an RFC 3339 time, after `now`."""
    try:
        when = read_moment(text)
    except TimeTextError as error:
        raise WaiverError(f"--until {text[:80]!r} {error}; write a date (2027-01-31) or an "
                          "RFC 3339 time (2027-01-31T12:00:00Z)") from None
    if when <= now:
        raise WaiverError(f"--until {stamp(when)} is in the past (now {stamp(now)}); a waiver "
                          "ends later than it starts")
    return when


async def stored_waivers(store: Store) -> list[Waiver]:
    """Every waiver the store holds (ended ones too; revoked ones not), read through the
    change feed: a command's read, never a request's."""
    held: dict[str, str | None] = {}
    cursor = 0
    while True:
        changes = await store.changes(cursor, _PAGE)
        for fact in changes.facts:
            if fact.kind == WAIVER:
                held[fact.key] = fact.value
        if changes.cursor == cursor or len(changes.facts) + len(changes.verdicts) < _PAGE:
            break
        cursor = changes.cursor
    found = [waiver for key, value in held.items() if value is not None
             and (waiver := Waiver.from_fact(key, value)) is not None]
    return sorted(found, key=lambda waiver: (waiver.until, waiver.subject))
