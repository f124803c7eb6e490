"""`mirrorgate exposure`: which clients pulled a version, a range, an advisory's versions, or
anything since a time, from the pull log in the state store (docs/exposure.md).

Exit 1 when anything was pulled (an incident to follow up), 0 when nothing was, 2 on a question
that cannot be asked (bad input, no store, an advisory the index does not know).
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson

from mirrorgate.config import Settings, StoreSettings
from mirrorgate.errors import MirrorgateError
from mirrorgate.gate.pulls.exposure import document, iso
from mirrorgate.moments import TimeTextError, read_moment
from mirrorgate.npm.names import InvalidNameError, parse_name
from mirrorgate.npm.versions import parse_range, parse_version
from mirrorgate.store import (
    Exposure,
    Store,
    StoreSetupError,
    StoreUnavailableError,
    open_store,
)

__all__ = ["Question", "QuestionError", "open_pull_log", "parse_question", "parse_since",
           "run_exposure"]

ADVISORY_ID = re.compile(r"(?:MAL|GHSA|CVE|OSV|GSD)-[A-Za-z0-9._-]+")
LIMIT = 1_000_000
"""(client, version) rows read for one question: the log's bounds bound it, this a mistake."""


class QuestionError(MirrorgateError):
    """A question that cannot be asked: the message says what is wrong (exit 2)."""


@dataclass(frozen=True)
class Question:
    """What was asked: `names` (None: every name), the versions of each that count, and a
    start time; `text` as it is shown back."""

    text: str
    names: tuple[str, ...] | None
    matches: Callable[[str, str], bool]
    since: datetime | None = None
    advisory: str | None = None


def parse_since(text: str, flag: str = "--since") -> datetime:
    try:
        return read_moment(text)  # a time without a zone is UTC, as the log is
    except TimeTextError as error:
        raise QuestionError(f"{flag} {text[:80]!r} {error}; write it as ISO 8601, e.g. "
                            f"{flag} 2026-03-31T00:00Z") from None


def parse_question(target: str | None, since: str | None) -> Question:
    """`name@version`, `name@range`, a bare `name` (every version), or None with `since`;
    raises QuestionError. An advisory id is resolved by `advisory_question`."""
    start = parse_since(since) if since is not None else None
    if target is None or not target.strip():
        if start is None:
            raise QuestionError("name what to look for: a version (axios@1.14.1), a range "
                                "('axios@>=1.14.1 <1.14.2'), an advisory id (MAL-2026-1234) "
                                "or --since TIME")
        return Question(f"since {iso(start)}", None, lambda _n, _v: True, start)
    text = target.strip()
    at = text.find("@", 1)  # a scope's own @ is the first character
    name_text, wanted = (text, "") if at < 0 else (text[:at], text[at + 1:].strip())
    try:
        name = parse_name(name_text).full
    except InvalidNameError as error:
        raise QuestionError(f"{name_text!r} is not a package name: {error}") from None
    if not wanted:
        return Question(f"{name} (every version)", (name,), lambda _n, _v: True, start)
    if parse_version(wanted) is not None:
        return Question(f"{name}@{wanted}", (name,), lambda _n, v: v == wanted, start)
    try:
        semver = parse_range(wanted)
    except ValueError as error:
        raise QuestionError(f"{wanted!r} is neither a version nor a range of {name}: the range "
                            f"{error}") from None

    def in_range(_name: str, version: str) -> bool:
        parsed = parse_version(version)
        return parsed is not None and semver.includes(parsed)

    return Question(f"{name}@{wanted}", (name,), in_range, start)


async def read_exposures(store: Store,
                         question: Question) -> tuple[list[Exposure], list[Exposure]]:
    """(served, refused): per client and version, summed by the store, the versions the
    question names, ordered by version then first pull."""
    served: list[Exposure] = []
    refused: list[Exposure] = []
    for name in question.names or (None,):
        served += await store.pulled(name=name, since=question.since, limit=LIMIT)
        refused += await store.refused(name=name, since=question.since, limit=LIMIT)

    def kept(found: list[Exposure]) -> list[Exposure]:
        return sorted((e for e in found if question.matches(e.name, e.version)),
                      key=lambda e: (e.name, e.version, e.first, e.client))
    return kept(served), kept(refused)


async def advisory_question(settings: Settings, advisory: str,
                            since: datetime | None) -> Question:
    """The versions an advisory (or an alias of one) affects, from the advisory index the
    rules file names, as the proxy loads it."""
    from mirrorgate.rules import RulesError, load_rules

    try:
        rules = load_rules(settings.rules_file, settings.malware_feed)
    except RulesError as error:
        raise QuestionError(f"the rules file cannot be read: {error}") from None
    if rules.advisories is None:
        raise QuestionError(f"{advisory} cannot be looked up: the rules use no advisory "
                            "source ([advisories] in the rules file); ask by version instead")
    feed = rules.advisories.feed
    await feed.refresh()
    index = feed.index
    if index is None:
        raise QuestionError(f"{advisory} cannot be looked up: the advisory index could not be "
                            "loaded; ask by version instead")
    affected = index.by_id(advisory)
    if not affected:
        raise QuestionError(f"the advisory index does not know {advisory}")

    def matches(name: str, version: str) -> bool:
        parsed = parse_version(version)
        key = parsed.key if parsed is not None else None
        return any(entry.hit(version, key) is not None
                   for entry in affected.get(name, ()))

    return Question(f"{advisory} ({', '.join(sorted(affected))})", tuple(sorted(affected)),
                    matches, since, advisory)


async def open_pull_log(settings: StoreSettings) -> Store:
    """The state store the proxy writes its pull log to, as it is configured; raises
    QuestionError when there is none there or it cannot be read."""
    if settings.database_url is None:
        from mirrorgate.store.sqlite import FILENAME

        where = Path(settings.data_dir) / FILENAME
        if not where.is_file():  # a wrong MIRRORGATE_DATA_DIR, not an empty log
            raise QuestionError(f"there is no state store at {where}: set MIRRORGATE_DATA_DIR "
                                "(or MIRRORGATE_DATABASE_URL) as the proxy has it")
    try:
        return await open_store(settings)
    except (StoreUnavailableError, StoreSetupError) as error:
        raise QuestionError(f"the state store cannot be read: {error}") from None


async def ask(settings: Settings, target: str | None, since: str | None) -> dict[str, object]:
    if target is not None and ADVISORY_ID.fullmatch(target.strip()):
        start = parse_since(since) if since is not None else None
        question = await advisory_question(settings, target.strip(), start)
    else:
        question = parse_question(target, since)
    store = await open_pull_log(settings.store)
    try:
        pulled, refused = await read_exposures(store, question)
    except StoreUnavailableError as error:
        raise QuestionError(f"the state store cannot be read: {error}") from None
    finally:
        await store.close()
    return {"question": question.text, "since": iso(question.since) if question.since else None,
            "store": store.info.kind,
            "clients": sorted({e.client for e in pulled}),
            "pulled": [document(e) for e in pulled],
            "refused": [document(e) for e in refused]}


def run_exposure(settings: Settings, target: str | None, since: str | None, *,
                 as_json: bool) -> int:
    try:
        answer = asyncio.run(ask(settings, target, since))
    except QuestionError as error:
        print(f"mirrorgate exposure: {error}", file=sys.stderr)
        return 2
    if as_json:
        sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(human(answer))
    return 1 if answer["pulled"] else 0


def human(answer: dict[str, object]) -> str:
    pulled = answer["pulled"]
    refused = answer["refused"]
    assert isinstance(pulled, list)
    assert isinstance(refused, list)
    lines = []
    if not pulled:
        lines.append(f"No client pulled {answer['question']} (pull log, {answer['store']}).")
    else:
        clients = answer["clients"]
        assert isinstance(clients, list)
        lines.append(f"{answer['question']} was pulled by {len(clients)} "
                     f"client{'s' if len(clients) != 1 else ''}: {', '.join(clients)}")
        lines += _table(pulled)
    if refused:
        lines.append("")
        lines.append("Refused (not served):")
        lines += _table(refused)
    return "\n".join(lines) + "\n"


def _table(rows: list[dict[str, object]]) -> list[str]:
    header = ("CLIENT", "VERSION", "FIRST", "LAST", "PULLS", "FROM")
    body = [(str(r["client"]), f"{r['name']}@{r['version']}", str(r["first"]), str(r["last"]),
             str(r["pulls"]), ",".join(r["sources"]) if isinstance(r["sources"], list) else "")
            for r in rows]
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    return ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            .rstrip() for row in (header, *body)]

