"""`mirrorgate check LOCKFILE...`: would the gate refuse anything these lockfiles pin?

Run before `npm ci`, it names every blocked dependency in one step, with its rule, its reason
and the nearest admitted version in range, instead of failing a build halfway.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from mirrorgate.commands.lockfiles import LockedEntry
from mirrorgate.commands.pinned import pinned
from mirrorgate.commands.report import Outcome, Report, usage_error
from mirrorgate.commands.verdicts import (
    GateVerdicts,
    ProxyVerdicts,
    Verdicts,
    VerdictsError,
    VerdictSource,
)
from mirrorgate.config import Settings
from mirrorgate.npm.names import InvalidNameError, parse_name
from mirrorgate.npm.versions import is_version_string, nearest, parse_range, parse_version

__all__ = ["CONCURRENCY", "check", "instead", "run_check"]

CONCURRENCY = 8
"""Packages judged at once (each is one packument fill, or a few requests to the proxy)."""


def _in_ranges(version: str, ranges: Sequence[str]) -> bool:
    parsed = parse_version(version)
    if parsed is None:
        return False
    for text in ranges:
        try:
            if parse_range(text).includes(parsed):
                return True
        except ValueError:
            continue  # a dist-tag or other non-range: says nothing about this version
    return False


def instead(entry: LockedEntry, admitted: Sequence[str]) -> str:
    """What to use instead of a refused locked version: the nearest admitted version within
    the lockfile's ranges for it (any admitted version when it records none)."""
    if entry.ranges:
        pool = [v for v in admitted if _in_ranges(v, entry.ranges)]
        within = " || ".join(entry.ranges)
        found = nearest(entry.version, pool)
        return (f"nearest admitted in {within}: {found}" if found
                else f"no admitted version in {within}")
    found = nearest(entry.version, admitted)
    return f"nearest admitted: {found}" if found else "no admitted version"


def _judge(entry: LockedEntry, verdicts: Verdicts) -> Outcome:
    where = entry.where
    # `resolved`: npm and bun fetch a locked URL as written, past the registry they are
    # pointed at, so a CI step can refuse a lockfile naming another host (docs/serving.md,
    # "Lockfiles written against another registry")
    data = {"lockfile": str(entry.lockfile), "line": entry.line, "ranges": list(entry.ranges),
            "alias": entry.alias, "resolved": entry.resolved}
    if not verdicts.known:
        return Outcome(entry.name, entry.version, "missing", finding=True,
                       reason="no registry has this package", where=where, data=data)
    denial = verdicts.denied.get(entry.version)
    if denial is not None:
        return Outcome(entry.name, entry.version, "denied", finding=True,
                       reason=f"{denial.rule}: {denial.reason}",
                       detail=instead(entry, verdicts.admitted), where=where,
                       data={**data, "rule": denial.rule})
    if entry.version not in verdicts.admitted:
        return Outcome(entry.name, entry.version, "missing", finding=True,
                       reason="no registry has this version",
                       detail=instead(entry, verdicts.admitted), where=where, data=data)
    would = verdicts.would_deny.get(entry.version)
    if would is not None:
        # report mode: installable today, and what enforcing the rule would change
        return Outcome(entry.name, entry.version, "would-deny",
                       reason=f"{would.rule} (report mode): {would.reason}", where=where,
                       data={**data, "rule": would.rule})
    excepted = verdicts.excepted.get(entry.version)
    if excepted is not None:
        return Outcome(entry.name, entry.version, "admitted", reason=excepted, where=where,
                       data=data)
    return Outcome(entry.name, entry.version, "admitted", where=where, data=data)


async def check(entries: Sequence[LockedEntry], source: VerdictSource, report: Report) -> None:
    """Judge every entry through `source`, adding one outcome per entry to `report`.

    A finding (exit 1) is a denied version, a version or package the registries do not have,
    an invalid name or version, or a package that could not be judged: a check that could not
    look is not a pass. (Git, file, link and workspace entries never reach here: they are notes,
    as no registry rule judges them.)
    """
    # each package is asked once however many lockfiles and versions pin it, a few at a time
    by_name: dict[str, list[LockedEntry]] = defaultdict(list)
    for entry in entries:
        by_name[entry.name].append(entry)
    progress = report.progress(len(by_name))
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(name: str, pinned: list[LockedEntry]) -> list[Outcome]:
        async with limit:
            try:
                package = parse_name(name)
            except InvalidNameError as error:
                return [Outcome(e.name, e.version, "invalid", finding=True,
                                reason=f"not a valid npm name: {error}", where=e.where)
                        for e in pinned]
            bad = [e for e in pinned if not is_version_string(e.version)]
            good = [e for e in pinned if is_version_string(e.version)]
            outcomes = [Outcome(e.name, e.version, "invalid", finding=True,
                                reason="not a valid version string", where=e.where)
                        for e in bad]
            if good:
                try:
                    verdicts = await source.verdicts(package, {e.version for e in good})
                except VerdictsError as error:
                    outcomes += [Outcome(e.name, e.version, "error", finding=True,
                                         reason=f"could not be checked: {error}",
                                         where=e.where) for e in good]
                else:
                    outcomes += [_judge(e, verdicts) for e in good]
            progress.step(name)
            return outcomes

    try:
        results = await asyncio.gather(*(one(n, p) for n, p in by_name.items()))
    finally:
        progress.close()
    for outcomes in results:
        for outcome in outcomes:
            report.add(outcome)


async def _run(settings: Settings, paths: list[Path], proxy: str | None,
               report: Report, policy: str | None = None) -> int:
    from mirrorgate.rules import RulesError, load_rules
    from mirrorgate.rules.policy import UnknownPolicyError

    if proxy is not None and policy is not None:
        return usage_error("--policy and --proxy cannot go together: the proxy judges by the "
                           "policy set of the client whose token asks (MIRRORGATE_PROXY_TOKEN)")
    entries = pinned(paths, report)
    if isinstance(entries, int):
        return entries
    source: VerdictSource
    if proxy is not None:
        from mirrorgate.commands.via_proxy import token_refused

        via = settings.via_proxy
        refused = await token_refused(via, proxy)
        if refused is not None:
            return usage_error(refused)
        source = ProxyVerdicts(proxy, token=via.proxy_token, timeout=via.upstream_timeout,
                               max_bytes=via.max_metadata_bytes)
    else:
        try:
            rules = load_rules(settings.rules_file, settings.malware_feed).policy(policy)
        except RulesError as error:
            return usage_error(f"MIRRORGATE_RULES_FILE ({settings.rules_file}): {error}")
        except UnknownPolicyError as error:
            return usage_error(f"--policy {policy}: {error}")
        from mirrorgate.commands.parts import as_the_fleet

        gate = await GateVerdicts.open(settings.upstreams, settings.gate,
                                       *await as_the_fleet(settings.store, rules))
        source = gate
        if await gate.load_advisories() == "failed":
            report.note("the advisory index could not be loaded; the rules' "
                        "[advisories] unavailable setting decides, as in the proxy")
    try:
        await check(entries, source, report)
    finally:
        await source.close()
    return report.finish()


def run_check(settings: Settings, paths: list[Path], *, proxy: str | None,
              as_json: bool, policy: str | None = None) -> int:
    """The command: 0 when every locked version is admitted, 1 with findings, 2 for a
    lockfile, rules file or policy set that cannot be used. `policy`: judge by the rules
    file's `[policy.NAME]`, as the proxy judges a client under it."""
    report = Report("check", as_json=as_json)
    return asyncio.run(_run(settings, paths, proxy, report, policy))
