"""Real projects' lockfiles, cold, through `mirrorgate serve` with every protection on in report
mode: do they install and replay offline, what would the rules refuse, what could they not read?

Per project of `bench/data/real_projects/` (its own client, frozen, cold cache, no retries, no
scripts): `direct`, `defaults` (a fresh `mirrorgate serve`, until mirrored), `protected` (the
same with RULES), `replay` (the protected mirror, public a dead port), `check` (`mirrorgate
check --json` of the lockfile under RULES). By hand only: it reaches the registry npm is
configured with. docs/serving.md#real-projects-every-protection-on-benchreal_projectspy.

    PYTHONPATH=/path/to/tree/src .venv/bin/python bench/real_projects.py [--projects a,b]
        [--ways direct,defaults,protected,replay,check] [--json FILE] [--render FILE...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path, as for -m
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.commands.lockfile_projects import Pnpm8
from tests.servers.npm import npm_executable
from tests.servers.package_managers import PackageManager, client
from tests.servers.processes import MirrorgateProcess, mirrorgate_argv

from bench.cpus import own_core
from bench.disk import filesystem_of
from bench.loops import child_environment
from bench.procstat import MIB, usage

DATA = Path(__file__).resolve().parent / "data" / "real_projects"
INSTALL_TIMEOUT = 1_800.0
MIRROR_WITHIN = 1_200.0
"""Seconds the worker may take, after the install, to mirror every version fetched."""
SETTLE = 0.5
"""Seconds after /readyz before the CPU baseline is read."""

RULES = """\
# Every protection on, in report mode: each rule says what it would refuse and serves it.
mode = "report"

# bare: every release signal on, each at its default action (quarantine)
[release]

[signatures]
verify = true

# each needs its action named; quarantine is what it does on, report mode serves it all the same
[provenance]
continuity = "quarantine"

[publisher]
change = "quarantine"

[install_scripts]
block = true
"""

WAYS = ("direct", "defaults", "protected", "replay", "check")
"""What `--ways` may ask for (the module's head says what each one does)."""

EVENTS = ("version_would_deny", "versions_would_deny", "release_signal_reported",
          "release_signal_refused", "release_unchecked", "release_read_partly",
          "tarball_scripts_refused", "tarball_spool_unreadable", "tarball_denied",
          "release_check_failed", "packument_refused", "mirror_release_failed")
"""The protected run's log events the report lists."""


@dataclass(frozen=True)
class Project:
    name: str
    client: str
    """A `tests.servers.package_managers` client name, or `pnpm8`."""
    env: Mapping[str, str] = field(default_factory=dict)
    """What the project's own client config sets that the install depends on."""
    args: tuple[str, ...] = ()
    """Flags added to the frozen install."""


PROJECTS: dict[str, Project] = {project.name: project for project in (
    Project("axios", "npm"),
    Project("chartjs", "pnpm8"),
    # it asks for Node 22.19; the clients here run on Node 20, and nothing is run
    Project("lighthouse", "yarn1", args=("--ignore-engines",)),
    # prettier's .yarnrc.yml: the cache key its checksums were written with, no age gate
    Project("prettier", "yarn4", {"YARN_COMPRESSION_LEVEL": "mixed",
                                  "YARN_NPM_MINIMAL_AGE_GATE": "0",
                                  "YARN_NODE_LINKER": "node-modules"}),
    Project("hono", "bun"),
)}

# npm and yarn 1 fetch a lockfile's `resolved` URL as written, and the lockfiles kept here name
# no registry's host (`registry.invalid`: bench/data/real_projects/README.md): a registry
# tarball path (`/<name>/-/<file>`) is pointed at the registry under test, as a company behind
# a proxy rewrites it; other URLs (a git host's archive) stay
_RESOLVED = re.compile(r'((?:"resolved": |resolved )")https?://[^/"]+/'
                       r'((?:@[^/"]+/)?[^/"@]+/-/[^"]+")')
"""A `resolved` tarball URL as `package-lock.json` (JSON) and `yarn.lock` (v1) write it."""
_RESOLVED_BY = {"npm": "package-lock.json", "yarn1": "yarn.lock"}
"""The clients whose lockfile's `resolved` URLs are fetched as written, and that lockfile."""


@dataclass
class Way:
    """One install: how it went and what mirrorgate used (None for `direct`)."""

    ok: bool = False
    error: str = ""
    wall: float = 0.0
    versions: int = 0
    """Mirror jobs the install enqueued: the versions fetched through mirrorgate."""
    cpu_install: float | None = None
    cpu_total: float | None = None
    peak_rss: int | None = None
    mirrored_after: float | None = None
    mirror_complete: bool | None = None
    would_deny: list[dict[str, Any]] = field(default_factory=list)
    unread: list[dict[str, Any]] = field(default_factory=list)
    report_counts: dict[str, float] = field(default_factory=dict)
    """`mirrorgate_rule_denials{mode="report"}` by rule: versions a rule would have refused."""
    enforced_counts: dict[str, float] = field(default_factory=dict)
    """... `{mode="enforce"}`: refused although the file says report (none is the goal)."""
    events: dict[str, int] = field(default_factory=dict)
    pinned: dict[str, int] = field(default_factory=dict)
    """`check`: the pinned registry versions by status (admitted, would-deny, ...)."""


def public_registry(given: str | None) -> str:
    if given:
        return given if given.endswith("/") else given + "/"
    npm = npm_executable() or "npm"
    found = subprocess.run([npm, "config", "get", "registry"], capture_output=True, text=True,
                           check=True, timeout=60).stdout.strip()
    return found if found.endswith("/") else found + "/"


def dead_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def driver(project: Project, workdir: Path) -> PackageManager:
    if project.client == "pnpm8":
        return Pnpm8(workdir)
    return client(project.client, workdir)


def prepare(project: Project, workdir: Path, registry: str) -> PackageManager:
    """A fresh client directory holding the project's files, configured for `registry`."""
    manager = driver(project, workdir)
    shutil.copytree(DATA / project.name, manager.project, dirs_exist_ok=True)
    (manager.project / "README.md").unlink(missing_ok=True)
    manager.configure(registry)
    lockfile = _RESOLVED_BY.get(project.client)
    if lockfile is not None:
        lock = manager.project / lockfile
        lock.write_text(_RESOLVED.sub(lambda m: m[1] + registry + m[2],
                                      lock.read_text(encoding="utf-8")), encoding="utf-8")
    return manager


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The client's first two lines that say what failed (npm's code, then what), else its
    last line."""
    lines = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines()
             if line.strip()]
    found = [line[:300] for line in lines
             if re.search(r"\berr(or)?\b|ERR!|ERR_|E404|403|ECONN|ETIMEDOUT|YN0001|YN0018|"
                          r"YN0028|failed", line, re.IGNORECASE)]
    if found:
        return " / ".join(found[:2])
    return (lines[-1] if lines else f"exit {done.returncode}")[:300]


def trust() -> dict[str, str]:
    """The machine's CA bundle settings, passed on: a network that inspects TLS re-signs the
    public registry's certificate, and the drivers' environments keep only PATH."""
    return {name: os.environ[name] for name in ("NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE",
                                                "SSL_CERT_DIR") if name in os.environ}


def install(project: Project, manager: PackageManager, way: Way) -> None:
    env = {**manager.environment(), **trust(), **project.env}
    started = time.perf_counter()
    try:
        done = subprocess.run([*manager.command(), *manager.frozen, *manager.isolation(),
                               *project.args],
                              cwd=manager.project, env=env, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        way.wall = time.perf_counter() - started
        way.error = f"timed out after {INSTALL_TIMEOUT:.0f} s"
        return
    way.wall = time.perf_counter() - started
    way.ok = done.returncode == 0
    if not way.ok:
        way.error = error_line(done)


def _jobs(proxy: MirrorgateProcess) -> tuple[float, float]:
    """(enqueued, finished) mirror jobs: finished counts every outcome but `retried`."""
    enqueued = proxy.metric("mirrorgate_jobs_enqueued_total")
    finished = sum(proxy.metric("mirrorgate_jobs_total", outcome=outcome)
                   for outcome in ("published", "already_present", "tampered", "retired"))
    return enqueued, finished


def wait_mirrored(proxy: MirrorgateProcess, way: Way) -> None:
    """Until every enqueued job has an outcome (and no new one came for 3 s), or give up."""
    started = time.perf_counter()
    deadline = time.monotonic() + MIRROR_WITHIN
    stable_since = time.monotonic()
    last = (-1.0, -1.0)
    while time.monotonic() < deadline and proxy.returncode is None:
        now = _jobs(proxy)
        if now != last:
            last, stable_since = now, time.monotonic()
        elif now[1] >= now[0] and time.monotonic() - stable_since >= 3.0:
            way.mirror_complete = True
            break
        time.sleep(0.5)
    else:
        way.mirror_complete = False
    way.mirrored_after = time.perf_counter() - started
    way.versions = int(last[0])


def start(env: Mapping[str, str], directory: Path) -> MirrorgateProcess:
    return MirrorgateProcess("serve", {"MIRRORGATE_LOG_LEVEL": "info", **trust(), **env},
                             workdir=directory).start(timeout=60)


def through(project: Project, workdir: Path, directory: Path, env: Mapping[str, str], *,
            mirror: bool) -> Way:
    """One cold install through a fresh `mirrorgate serve`, its usage, and (protected) what
    the rules said."""
    way = Way()
    proxy = start(env, directory)
    try:
        time.sleep(SETTLE)
        base = usage(proxy.pid)
        install(project, prepare(project, workdir, proxy.registry_url), way)
        way.cpu_install = usage(proxy.pid).minus(base).cpu
        if mirror:
            wait_mirrored(proxy, way)
        else:
            way.versions = int(_jobs(proxy)[0])
        final = usage(proxy.pid)
        way.cpu_total = final.minus(base).cpu
        way.peak_rss = final.peak_rss
        collect(proxy, way)
    finally:
        proxy.terminate(timeout=120)
    return way


def collect(proxy: MirrorgateProcess, way: Way) -> None:
    counts: Counter[str] = Counter()
    for entry in proxy.logs():
        event = entry.get("event", "")
        if event not in EVENTS:
            continue
        counts[event] += 1
        shown: dict[str, Any] = {key: entry[key] for key in (
            "event", "package", "version", "rule", "signal", "reason", "count", "rules", "sent",
            "refused", "where", "compared_with", "unread") if key in entry}
        if event == "versions_would_deny" or (event == "version_would_deny"
                                              and "where" not in entry):
            continue  # a packument's versions, installed or not: `check` has the pinned ones
        if event in ("version_would_deny", "versions_would_deny", "release_signal_reported",
                     "release_signal_refused", "tarball_denied"):
            way.would_deny.append(shown)
        else:
            way.unread.append(shown)
    way.events = dict(counts)
    for name, value in proxy.metrics().items():
        if not name.startswith("mirrorgate_rule_denials_total{") or not value:
            continue
        rule = re.search(r'rule="([^"]*)"', name)
        counts_of = way.report_counts if 'mode="report"' in name else way.enforced_counts
        counts_of[rule[1] if rule else name] = value


def run_project(project: Project, ways: list[str], public: str, root: Path,
                order: int) -> dict[str, Way]:
    rules = root / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    results: dict[str, Way] = {}
    protected_dir = root / f"{project.name}-protected-mg"
    # alternate which of direct and defaults goes first, from one project to the next
    sequence: list[str] = [w for w in ("direct", "defaults") if w in ways]
    if order % 2:
        sequence.reverse()
    sequence += [w for w in ("protected", "replay", "check") if w in ways]
    for name in sequence:
        workdir = Path(tempfile.mkdtemp(prefix=f"{project.name}-{name}-", dir=root))
        print(f"  {project.name} {name} ...", flush=True)
        try:
            way = one_way(project, name, workdir, root, public, rules, protected_dir)
        except Exception as error:  # a bench keeps going and reports it
            way = Way(error=f"the bench could not run it: {str(error)[:400]}")
        shutil.rmtree(workdir, ignore_errors=True)
        results[name] = way
        print(f"  {project.name} {name}: {'pass' if way.ok else 'FAIL ' + way.error} "
              f"{way.wall:.0f} s" + (f", CPU {way.cpu_total:.1f} s, peak RSS "
                                     f"{(way.peak_rss or 0) / MIB:.0f} MiB, {way.versions} "
                                     f"versions" if way.cpu_total is not None else ""),
              flush=True)
    shutil.rmtree(protected_dir, ignore_errors=True)
    return results


def one_way(project: Project, name: str, workdir: Path, root: Path, public: str, rules: Path,
            protected_dir: Path) -> Way:
    if name == "direct":
        way = Way()
        install(project, prepare(project, workdir, public), way)
        return way
    if name == "defaults":
        directory = root / f"{project.name}-defaults-mg"
        try:
            return through(project, workdir, directory, {"MIRRORGATE_PUBLIC_UPSTREAM": public},
                           mirror=True)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    if name == "check":
        return check(project, workdir, public, rules)
    if name == "protected":
        return through(project, workdir, protected_dir,
                       {"MIRRORGATE_PUBLIC_UPSTREAM": public,
                        "MIRRORGATE_RULES_FILE": str(rules)}, mirror=True)
    return through(project, workdir, protected_dir,
                   {"MIRRORGATE_PUBLIC_UPSTREAM": f"http://127.0.0.1:{dead_port()}/",
                    "MIRRORGATE_RULES_FILE": str(rules)}, mirror=False)


def check(project: Project, workdir: Path, public: str, rules: Path) -> Way:
    """`mirrorgate check --json` of the project's lockfile under the rules: each pinned
    version's verdict, the would-denies with rule and reason."""
    way = Way()
    manager = prepare(project, workdir, public)
    home = workdir / "check-home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "LANG": "C.UTF-8",
           "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "MIRRORGATE_LOG_LEVEL": "warning",
           "MIRRORGATE_DATA_DIR": str(home / "data"), "MIRRORGATE_PUBLIC_UPSTREAM": public,
           "MIRRORGATE_RULES_FILE": str(rules), **trust()}
    started = time.perf_counter()
    done = subprocess.run([*mirrorgate_argv(), "check", "--json", manager.lockfile],
                          cwd=manager.project, env=env, capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT, check=False, stdin=subprocess.DEVNULL)
    way.wall = time.perf_counter() - started
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        way.error = error_line(done)
        return way
    statuses: Counter[str] = Counter()
    for result in answer.get("results", []):
        statuses[result["status"]] += 1
        if result["status"] != "admitted":
            entry = {key: result.get(key) for key in ("package", "version", "status",
                                                       "reason")}
            (way.would_deny if result["status"] == "would-deny" else way.unread).append(entry)
    way.pinned = dict(statuses)
    way.versions = sum(statuses.values())
    way.ok = not way.unread
    if way.unread:
        way.error = f"{len(way.unread)} pinned versions not admitted (see the list)"
    return way


# --- reporting --------------------------------------------------------------------------------

def _cell(way: Way | None) -> str:
    if way is None:
        return "-"
    return "pass" if way.ok else "**fail**"


def _usage(way: Way | None) -> str:
    if way is None or way.cpu_total is None:
        return "-"
    versions = max(way.versions, 1)
    return (f"{way.wall:.0f} s, {way.cpu_total * 1000 / versions:.1f} ms, "
            f"{(way.peak_rss or 0) / MIB:.0f} MiB")


def _by_rule(entries: list[dict[str, Any]]) -> str:
    """`rule count, ...` over distinct (package, version, rule)."""
    seen = {(e.get("package"), e.get("version"), e.get("rule") or e.get("signal") or
             str(e.get("reason", "")).split(" ", 1)[0]) for e in entries}
    counts = Counter(rule for _, _, rule in seen)
    return ", ".join(f"{rule} {count}" for rule, count in sorted(counts.items())) or "none"


REFUSED = ("tarball_denied", "release_signal_refused", "tarball_scripts_refused")
"""Log events of a version refused (or cut) although the rules file says report."""
TARBALL_WOULD = ("release_signal_reported", "version_would_deny")
"""... of a would-deny decided from the tarball's bytes (the packument's are `check`'s)."""
UNCHECKED = ("release_unchecked", "release_read_partly", "tarball_spool_unreadable",
             "release_check_failed")


def table(results: dict[str, dict[str, Way]]) -> str:
    lines = ["| project (client) | versions pinned / fetched | install, replay (wall) | direct | "
             "defaults: wall, CPU a version, peak RSS | every protection (report): wall, CPU a "
             "version, peak RSS | would-deny, pinned (check) | would-deny from the bytes | "
             "refused all the same | unchecked or partly read |",
             "|---|---:|---|---:|---|---|---|---|---|---|"]
    for name, ways in results.items():
        project = PROJECTS[name]
        direct, defaults = ways.get("direct"), ways.get("defaults")
        protected, replay = ways.get("protected"), ways.get("replay")
        checked = ways.get("check")
        fetched = protected.versions if protected else defaults.versions if defaults else 0
        pinned = checked.versions if checked else "-"
        installs = f"{_cell(protected)}, {_cell(replay)}"
        if replay is not None and replay.ok:
            installs += f" ({replay.wall:.0f} s)"
        if defaults is not None and not defaults.ok:
            installs += " (defaults **fail**)"
        direct_wall = (f"{direct.wall:.0f} s" if direct is not None and direct.ok
                       else _cell(direct))
        pinned_would = _by_rule([{**e, "rule": str(e.get("reason", "")).split(" ", 1)[0]}
                                 for e in checked.would_deny]) if checked else "-"
        if protected is None:
            bytes_would = refused = unchecked = "-"
        else:
            events = protected.would_deny + protected.unread
            bytes_would = _by_rule([e for e in events if e["event"] in TARBALL_WOULD
                                    and (e["event"] != "version_would_deny" or "where" in e)])
            refused = _by_rule([e for e in events if e["event"] in REFUSED])
            unchecked_events = [e for e in events if e["event"] in UNCHECKED]
            unchecked = _by_rule([{**e, "rule": e["event"]} for e in unchecked_events])
        lines.append(f"| {name} ({project.client}) | {pinned} / {fetched} | {installs} | "
                     f"{direct_wall} | {_usage(defaults)} | {_usage(protected)} | "
                     f"{pinned_would} | {bytes_would} | {refused} | {unchecked} |")
    return "\n".join(lines)


def details(results: dict[str, dict[str, Way]]) -> str:
    out: list[str] = []
    for name, ways in results.items():
        for label, way in ways.items():
            if not way.ok:
                out.append(f"- {name} {label} failed: `{way.error}`")
            if way.mirror_complete is False:
                out.append(f"- {name} {label}: not every version mirrored within "
                           f"{MIRROR_WITHIN:.0f} s")
        checked = ways.get("check")
        for entry in checked.would_deny + checked.unread if checked is not None else []:
            out.append(f"- {name} pinned: {json.dumps(entry)}")
        protected = ways.get("protected")
        if protected is None:
            continue
        for entry in protected.would_deny:
            if entry["event"] == "versions_would_deny" or (
                    entry["event"] == "version_would_deny" and "where" not in entry):
                continue  # a packument's versions, installed or not: `check` has the pinned

            out.append(f"- {name} would-deny: {json.dumps(entry)}")
        for entry in protected.unread:
            out.append(f"- {name} unread/unchecked: {json.dumps(entry)}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--projects", default=",".join(PROJECTS))
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--public", default=None,
                        help="the public registry (default: the one npm is configured with)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    parser.add_argument("--label", default="")
    parser.add_argument("--own-core", action="store_true",
                        help="mirrorgate on the first CPU alone, npm on the others: mirrorgate "
                        "as deployed, on a host apart from the build's")
    parser.add_argument("--render", type=Path, nargs="+", default=None,
                        help="print the table of earlier runs' --json files (their ways "
                        "merged, the later file winning), and stop")
    options = parser.parse_args()
    if options.render is not None:
        loaded: dict[str, dict[str, Way]] = {}
        for saved_file in options.render:
            saved = json.loads(saved_file.read_text(encoding="utf-8"))
            for name, saved_ways in saved["results"].items():
                loaded.setdefault(name, {}).update(
                    {label: Way(**way) for label, way in saved_ways.items()})
        print(f"{table(loaded)}\n\n{details(loaded)}")
        return 0
    # the children run in directories of their own: a relative PYTHONPATH would silently
    # import whatever mirrorgate the virtualenv has installed instead of the tree asked for
    os.environ["PYTHONPATH"] = os.pathsep.join(
        str(Path(entry).resolve()) for entry in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if entry)
    ways = [w for w in options.ways.split(",") if w]
    unknown = sorted(set(ways) - set(WAYS))
    if unknown:
        parser.error(f"--ways: unknown {', '.join(unknown)}; the ways are {', '.join(WAYS)}")
    if "replay" in ways and "protected" not in ways:
        # the replay installs from what the protected run mirrored: alone it would find an
        # empty mirror and fail at its first tarball, which says nothing about mirrorgate
        parser.error("--ways: replay installs from the mirror the protected run fills; ask "
                     "for protected too (--ways protected,replay)")
    names = [n for n in options.projects.split(",") if n]
    unknown = sorted(set(names) - set(PROJECTS))
    if unknown:
        parser.error(f"--projects: unknown {', '.join(unknown)}; the projects are "
                     f"{', '.join(PROJECTS)}")
    public = public_registry(options.public)
    root = Path(tempfile.mkdtemp(prefix="bench-real-projects-"))
    results: dict[str, dict[str, Way]] = {}
    mirrorgate_from = os.environ.get("PYTHONPATH")
    if options.own_core:
        try:  # every mirrorgate this process starts runs the line first, from its PYTHONPATH
            os.environ.update(child_environment(root, startup=[own_core()]))
        except ValueError as error:
            parser.error(str(error))
    print(f"{options.label or 'run'}: mirrorgate from {mirrorgate_from}; "
          f"{os.cpu_count()} CPUs; working on {filesystem_of(root)} (bench.disk); "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
          flush=True)
    try:
        for order, name in enumerate(names):
            results[name] = run_project(PROJECTS[name], ways, public, root, order)
            if options.json is not None:
                options.json.write_text(json.dumps(
                    {"label": options.label, "results": {
                        n: {w: asdict(way) for w, way in r.items()}
                        for n, r in results.items()}}, indent=1), encoding="utf-8")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(table(results))
    print()
    print(details(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
