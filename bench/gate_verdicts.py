"""mirrorgate's verdict on the corpus's releases, as `mirrorgate check` and the proxy reach it: the
cases served by the fixture registry on loopback, judged by the gate itself (`GateVerdicts`:
the fill, the packument rules, the release verdicts, each release's bytes read as a first pull
reads them), under one policy per run, CPU measured per release.

Whatever reading and rules the `mirrorgate` package on the path holds are what is measured:
`PYTHONPATH=/path/to/tree/src` points the bench at another tree's gate, nothing else changes.
Cases are served in rounds in which no package name repeats (two pins of `debug`, a dependency
two releases add), and each round is judged by a gate of its own, so no verdict or reading of
one case is another's baseline.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.packages import FixturePackage, FixtureVersion, default_dist_tags, iso

from bench.corpus import Case, Dependency
from mirrorgate.commands.verdicts import GateVerdicts
from mirrorgate.config import load_settings
from mirrorgate.npm.names import parse_name
from mirrorgate.rules import DEFAULT_RULES, Rules, parse_rules
from mirrorgate.rules.typosquat import popular_names

__all__ = ["POLICIES", "ROUND", "Judged", "judge_cases", "rounds"]

ROUND = 100
"""Cases served at once, at most."""

POLICIES: dict[str, Rules] = {
    "defaults": DEFAULT_RULES,
    # every release signal on at its default action: the `[release]` table, bare
    "every signal": parse_rules("[release]\n", "bench: every signal"),
}


@dataclass(frozen=True)
class Judged:
    """One release's verdict under one policy: refused (by `rule`, for `reason`) or admitted,
    what a report-mode rule would have refused, and the CPU the verdict cost this process."""

    name: str
    version: str
    refused: bool
    rule: str | None
    reason: str | None
    cpu: float
    size: int
    error: str | None = None


def _time_map(created: datetime, published: Mapping[str, datetime]) -> dict[str, str]:
    moments = [created, *published.values()]
    return {"created": iso(min(moments)), "modified": iso(max(moments)),
            **{version: iso(when) for version, when in published.items()}}


def package_of(case: Case) -> FixturePackage:
    """The case's package as the fixture registry serves it: the real manifests and bytes,
    its first publish in `time.created`, its maintainers."""
    versions = {p.version: FixtureVersion(manifest=dict(p.manifest), published=p.published,
                                          explicit_tarball=p.tarball.read_bytes(),
                                          dist_overrides=dict(p.dist))
                for p in case.versions}
    fields: dict[str, object] = {"time": _time_map(case.created, {
        p.version: p.published for p in case.versions})}
    if case.maintainers:
        fields["maintainers"] = [dict(m) for m in case.maintainers]
    return FixturePackage(case.name, versions, default_dist_tags(versions), fields=fields)


def dependency_package(dependency: Dependency) -> FixturePackage:
    """A dependency a release adds: its manifests (publishers, provenance) and its times; its
    tarballs are never asked for, so each is the manifest alone."""
    versions = {str(m["version"]): FixtureVersion(manifest=dict(m),
                                                  published=dependency.times[str(m["version"])])
                for m in dependency.manifests}
    created = dependency.times.get("created") or min(dependency.times.values())
    fields: dict[str, object] = {"time": _time_map(created, {
        v: dependency.times[v] for v in versions})}
    return FixturePackage(dependency.name, versions, default_dist_tags(versions), fields=fields)


def packages_of(case: Case) -> list[FixturePackage]:
    found = [package_of(case), *(dependency_package(d) for d in case.dependencies)]
    for other in case.also:
        found += packages_of(other)
    return found


def rounds(cases: Iterable[Case], size: int = ROUND) -> list[list[Case]]:
    """The cases in rounds of at most `size` where no package name is served twice, in their
    order (a round's tarballs are held in memory while it is served)."""
    found: list[tuple[set[str], list[Case]]] = []
    for case in cases:
        for names, members in found:
            if len(members) < size and not names & case.names:
                names |= case.names
                members.append(case)
                break
        else:
            found.append((set(case.names), [case]))
    return [members for _names, members in found]


def _cpu_of(thread_name: str) -> Callable[[], float]:
    """The CPU clock of the fixture registry's thread (its serving is not mirrorgate's)."""
    thread = next(t for t in threading.enumerate() if t.name == thread_name)
    assert thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    return lambda: time.clock_gettime(clock)


async def judge_cases(cases: list[Case], policy: Rules,
                      progress: Callable[[Judged], None] = lambda _judged: None,
                      ) -> dict[tuple[str, str], Judged]:
    """Every judged release of `cases` under `policy`, by (name, version)."""
    results: dict[tuple[str, str], Judged] = {}
    registry = FixtureRegistry()
    with registry, tempfile.TemporaryDirectory(prefix="mg-side-by-side-") as data:
        served = _cpu_of(f"{registry.name}-{registry.port}")
        settings = dataclasses.replace(
            load_settings({"MIRRORGATE_PUBLIC_UPSTREAM": registry.url,
                           "MIRRORGATE_DATA_DIR": data, "MIRRORGATE_LOG_LEVEL": "error"},
                          npm_registry=lambda: None),
            upstream_timeout=120.0)
        # one-time costs of a process (the popular names' index, the readers' first use) are
        # not a case's: paid before the first one is measured
        await asyncio.to_thread(popular_names)
        if cases:
            first = rounds(cases)[0][0]
            registry.add(*packages_of(first))
            gate = await GateVerdicts.open(settings.upstreams, settings.gate, policy)
            name, version, _path = first.judged_tarballs()[0]
            await gate.verdicts(parse_name(name), [version])
            await gate.close()
        for members in rounds(cases):
            packages = [package for case in members for package in packages_of(case)]
            registry.add(*packages)
            gate = await GateVerdicts.open(settings.upstreams, settings.gate, policy)
            try:
                for case in members:
                    for name, version, tarball in case.judged_tarballs():
                        judged = await _judge(gate, name, version, tarball.stat().st_size,
                                              served)
                        results[(name, version)] = judged
                        progress(judged)
            finally:
                await gate.close()
                for package in packages:
                    registry.remove(package.name)
    return results


async def _judge(gate: GateVerdicts, name: str, version: str, size: int,
                 served: Callable[[], float]) -> Judged:
    # the process's CPU (every thread: the loop, the readings' worker threads) less the
    # fixture registry's thread: what mirrorgate spent on this verdict
    started, serving = time.process_time(), served()
    try:
        verdicts = await gate.verdicts(parse_name(name), [version])
    except Exception as error:  # a bench: the error is a result, and on to the next
        cpu = (time.process_time() - started) - (served() - serving)
        return Judged(name, version, False, None, None, cpu, size,
                      f"{type(error).__name__}: {error}"[:300])
    cpu = (time.process_time() - started) - (served() - serving)
    denial = verdicts.denied.get(version)
    if denial is not None:
        return Judged(name, version, True, denial.rule, denial.reason, cpu, size)
    if version not in verdicts.admitted:
        return Judged(name, version, False, None, None, cpu, size,
                      "the gate listed the version neither admitted nor denied")
    return Judged(name, version, False, None, None, cpu, size)


def policy_from(text: str) -> tuple[str, Rules]:
    """`NAME=FILE` from the command line: another policy to measure (a rules file)."""
    name, _, path = text.partition("=")
    if not path:
        raise ValueError(f"--policy wants NAME=RULES_FILE, not {text!r}")
    return name, parse_rules(Path(path).read_text(encoding="utf-8"), path)
