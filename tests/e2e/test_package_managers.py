"""Every package manager people use, through mirrorgate in front of a real Verdaccio.

npm, pnpm, yarn 1, yarn 4 (Plug'n'Play, its one-day age gate on) and bun each, with a cold cache
and its project config written from the snippets of docs/serving.md: install a six-package tree
(one scoped), replay it with the public upstream stopped, install again from the lockfile it
wrote, and meet a denied version with and without a lockfile. Client tokens are on
(`MIRRORGATE_CLIENT_TOKENS_FILE`), so each client must send the token line docs/serving.md
shows. Decisions:

- One `Journey` per client (a module-scoped fixture parametrised by client), so pytest runs a
  client's cases together and tears its servers down before the next client starts. Each
  journey has its own public registry, Verdaccio and proxy port: a client's cold install is
  never warmed by another's.
- Steps are lazy and idempotent (`cold()`, `go_offline()`, `offline()`), so any single case
  also runs alone.
- yarn 4 keeps its default one-day age gate: its replay with the public upstream down passes
  because a mirrored version is served with its public publish time (the mirror mark), not
  the moment Verdaccio stamped when it was mirrored.
- mirrorgate keeps its port across restarts, as an organisation's proxy URL does: yarn 1 and
  npm write the tarball URLs into their lockfiles.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mirrorgate.access.tokens import token_line
from tests.e2e.mirroring import assert_verdaccio_holds_the_tree
from tests.servers.availability import serving, unavailable
from tests.servers.client_config import (
    CONTACT,
    DENIED_SAYS,
    DENIED_WAY_OUT_SAYS,
    LOCKED_DENIED_SAYS,
    LOCKED_WAY_OUT_SAYS,
    says,
)
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.package_managers import CLIENTS, TOKEN, PackageManager, client
from tests.servers.packages import EPOCH, make_package, make_version, standard_tree
from tests.servers.ports import free_port
from tests.servers.processes import MirrorgateProcess, ServerUnavailableError, wait_for
from tests.servers.verdaccio import Verdaccio

TREE = standard_tree()
# yarn 4 refuses versions younger than a day (npmMinimalAgeGate): every fixture version says
# it was published more than a day ago (2020, EPOCH onwards), and a mirrored copy must keep
# that public time.
A_DAY_AGO = datetime.now(UTC) - timedelta(days=1)
DIRECT = {name: TREE.resolved[name] for name in TREE.dependencies}
# `gate-locked` is admitted when a lockfile names it, then denied; `gate-pinned@2.0.0` is
# denied from the start, and 1.0.0 stays admitted (so the package itself exists); each has an
# admitted version a refusal names as the one to use instead.
GATE_PACKAGES = [make_package("gate-locked", ["0.9.0", "1.0.0"]),
                 make_package("gate-pinned", ["1.0.0", "2.0.0"]),
                 # relicensed: 0.9.0 under MIT, 1.0.0 under GPL-3.0-only, which the rules deny
                 make_package("gate-licensed", [
                     make_version("gate-licensed", "0.9.0", license="MIT"),
                     make_version("gate-licensed", "1.0.0", license="GPL-3.0-only",
                                  published=EPOCH + timedelta(days=1))])]
assert all(EPOCH <= v.published < A_DAY_AGO
           for p in (*TREE.packages, *GATE_PACKAGES) for v in p.versions.values())
RULES = ('[deny]\npackages = ["gate-locked@1.0.0", "gate-pinned@2.0.0"]\n\n'
         '[license]\ndeny = ["GPL-*"]\n')


def output(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + "\n" + done.stderr


class Journey:
    """One client's servers and project, and the steps taken so far."""

    def __init__(self, name: str, workdir: Path, verdaccio: Verdaccio) -> None:
        self.name = name
        self.workdir = workdir
        self.verdaccio = verdaccio
        self.public = FixtureRegistry(*TREE.packages, *GATE_PACKAGES)
        self.port = free_port()
        self.processes: list[MirrorgateProcess] = []
        self.proxy: MirrorgateProcess | None = None
        self.client = client(name, workdir / "client")
        self.cold_result: subprocess.CompletedProcess[str] | None = None
        self.cold_lockfile = ""
        self.offline_result: subprocess.CompletedProcess[str] | None = None
        self.offline_proxy = False

    def tokens_file(self) -> str:
        """Client tokens on: only a client that sends the auth line docs/serving.md shows gets in,
        and mirrorgate's log lines name it."""
        path = self.workdir / "clients.txt"
        path.write_text(token_line(f"{self.name}-client", TOKEN) + "\n", encoding="utf-8")
        return str(path)

    def env(self, **extra: str) -> dict[str, str]:
        return {"MIRRORGATE_PUBLIC_UPSTREAM": self.public.url,
                "MIRRORGATE_PRIVATE_UPSTREAM": self.verdaccio.url,
                "MIRRORGATE_PRIVATE_TOKEN": self.verdaccio.token,
                "MIRRORGATE_CLIENT_TOKENS_FILE": self.tokens_file(),
                "MIRRORGATE_LISTEN": f"127.0.0.1:{self.port}", **extra}

    def restart(self, env: dict[str, str]) -> MirrorgateProcess:
        """Stop the running proxy, then start a fresh one (nothing cached) on the same port."""
        if self.proxy is not None and self.proxy.returncode is None:
            assert self.proxy.terminate() == 0
        self.proxy = MirrorgateProcess(
            "serve", env, workdir=self.workdir / f"mirrorgate-{len(self.processes)}")
        self.processes.append(self.proxy)
        return self.proxy.start()

    def cold(self) -> subprocess.CompletedProcess[str]:
        if self.cold_result is None:
            if not self.public.running:
                self.public.start()
            proxy = self.restart(self.env())
            self.client.configure(proxy.registry_url)
            self.client.write_project(TREE.dependencies)
            self.cold_result = self.client.install()
            if self.cold_result.returncode == 0:
                self.cold_lockfile = self.client.lockfile_text()
        return self.cold_result

    def go_offline(self) -> None:
        """After the cold install is mirrored: the public upstream stopped, and a fresh
        mirrorgate (nothing cached) on the same URL."""
        if self.public.running or not self.offline_proxy:
            assert self.cold().returncode == 0, output(self.cold())
            assert_verdaccio_holds_the_tree(self.verdaccio, self.public, TREE)
            self.public.stop()
            self.restart(self.env())
            self.offline_proxy = True

    def offline(self) -> subprocess.CompletedProcess[str]:
        """The same install, cold and without the lockfile, with the public upstream down."""
        if self.offline_result is None:
            self.go_offline()
            self.client.forget(lockfile=True)
            self.offline_result = self.client.install()
        return self.offline_result

    def close(self) -> None:
        for process in self.processes:
            if process.process is not None and process.returncode is None:
                process.running.stop(timeout=10)
        if self.public.running:
            self.public.stop()


@pytest.fixture(scope="module", params=list(CLIENTS))
def journey(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Journey]:
    name: str = request.param
    workdir = tmp_path_factory.mktemp(f"clients-{name}")
    try:
        client(name, workdir / "probe").command()
    except ServerUnavailableError as error:
        unavailable(str(error))
    with serving(Verdaccio(workdir / "verdaccio"), "Verdaccio") as verdaccio:
        journey = Journey(name, workdir, verdaccio)
        try:
            yield journey
        finally:
            journey.close()


def test_a_cold_install_through_mirrorgate_resolves_the_tree_and_mirrors_every_tarball(
    journey: Journey,
) -> None:
    done = journey.cold()

    assert done.returncode == 0, output(done)
    assert journey.client.installed(DIRECT) == DIRECT
    assert journey.cold_lockfile, f"{journey.name} wrote no {journey.client.lockfile}"
    assert_verdaccio_holds_the_tree(journey.verdaccio, journey.public, TREE)


def test_a_scoped_package_is_served_and_mirrored_under_its_scope(journey: Journey) -> None:
    assert journey.cold().returncode == 0, output(journey.cold())

    assert journey.client.installed(["@fixture/beta"]) == {"@fixture/beta": "2.1.3"}
    assert "2.1.3" in journey.verdaccio.versions("@fixture/beta")
    assert journey.proxy is not None
    served = {(e["package"], e["version"]) for e in journey.proxy.events("tarball_served")}
    assert ("@fixture/beta", "2.1.3") in served


def test_the_install_replays_from_the_private_side_with_the_public_upstream_stopped(
    journey: Journey,
) -> None:
    done = journey.offline()

    assert done.returncode == 0, output(done)
    assert journey.client.installed(DIRECT) == DIRECT


def test_the_lockfile_the_client_wrote_installs_from_the_private_side_alone(
    journey: Journey,
) -> None:
    # the public upstream is down here too: what the lockfile names comes from the private side
    journey.go_offline()
    journey.client.forget(lockfile=True)
    (journey.client.project / journey.client.lockfile).write_text(journey.cold_lockfile,
                                                                  encoding="utf-8")

    done = journey.client.install_frozen()

    assert done.returncode == 0, output(done)
    assert journey.client.installed(DIRECT) == DIRECT


class Gate:
    """A strict mirrorgate (the deny rules) on a port of its own, public upstream up, no
    private upstream: a denied version can only come from the public side."""

    def __init__(self, journey: Journey, rules: Path) -> None:
        self.journey = journey
        self.port = free_port()
        self.rules = rules

    def start(self, *, strict: bool) -> MirrorgateProcess:
        journey = self.journey
        if not journey.public.running:
            journey.public.start()
        env = {"MIRRORGATE_PUBLIC_UPSTREAM": journey.public.url,
               "MIRRORGATE_CLIENT_TOKENS_FILE": journey.tokens_file(),
               "MIRRORGATE_OPERATOR_CONTACT": CONTACT,
               "MIRRORGATE_LISTEN": f"127.0.0.1:{self.port}"}
        if strict:
            env["MIRRORGATE_RULES_FILE"] = str(self.rules)
        process = MirrorgateProcess("serve", env, workdir=journey.workdir
                                    / f"gate-{len(journey.processes)}")
        journey.processes.append(process)
        return process.start()


@pytest.fixture
def gate(journey: Journey, tmp_path: Path) -> Gate:
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    return Gate(journey, rules)


def fresh_client(journey: Journey, tmp_path: Path, what: str) -> PackageManager:
    return client(journey.name, tmp_path / what)


def test_a_denied_version_is_refused_and_logged_with_the_rule(
    journey: Journey, gate: Gate, tmp_path: Path,
) -> None:
    proxy = gate.start(strict=True)
    project = fresh_client(journey, tmp_path, "pinned")
    project.configure(proxy.registry_url)
    project.write_project({})

    done = project.install("gate-pinned@2.0.0")

    assert done.returncode != 0, output(done)
    for template in (DENIED_SAYS[journey.name], *DENIED_WAY_OUT_SAYS.get(journey.name, ())):
        assert says(template, proxy.registry_url, "gate-pinned", "2.0.0", "deny-list",
                    admitted="1.0.0") in output(done), output(done)
    assert project.installed(["gate-pinned"]) == {}
    # the log line is read from the process's stderr: the client's answer can overtake it
    wait_for(lambda: ("gate-pinned", ["2.0.0"], ["deny-list"], f"{journey.name}-client") in [
        (e["package"], e["versions"], e["rules"], e.get("client"))
        for e in proxy.events("versions_denied")],
        message="versions_denied for gate-pinned@2.0.0, naming the client")


def test_a_locked_version_denied_later_fails_with_mirrorgates_reason_where_the_client_shows_it(
    journey: Journey, gate: Gate, tmp_path: Path,
) -> None:
    project = fresh_client(journey, tmp_path, "locked")
    lenient = gate.start(strict=False)
    project.configure(lenient.registry_url)
    project.write_project({"gate-locked": "1.0.0"})
    assert project.install().returncode == 0
    assert lenient.terminate() == 0
    strict = gate.start(strict=True)  # the same URL, now with rules that deny the version
    project.forget(lockfile=False)

    done = project.install_frozen()

    assert done.returncode != 0, output(done)
    for template in (LOCKED_DENIED_SAYS[journey.name],
                     *LOCKED_WAY_OUT_SAYS.get(journey.name, ())):
        assert says(template, strict.registry_url, "gate-locked", "1.0.0", "deny-list",
                    admitted="0.9.0") in output(done), output(done)
    denials: list[dict[str, Any]] = wait_for(lambda: strict.events("tarball_denied"),
                                              message="tarball_denied")
    assert {(e["package"], e["version"], e["rule"]) for e in denials} == {
        ("gate-locked", "1.0.0", "deny-list")}



def test_a_version_of_a_denied_license_is_refused_naming_the_license_where_the_client_shows_it(
    journey: Journey, gate: Gate, tmp_path: Path,
) -> None:
    proxy = gate.start(strict=True)
    project = fresh_client(journey, tmp_path, "licensed")
    project.configure(proxy.registry_url)
    project.write_project({})

    done = project.install("gate-licensed@1.0.0")

    assert done.returncode != 0, output(done)
    for template in (DENIED_SAYS[journey.name], *DENIED_WAY_OUT_SAYS.get(journey.name, ())):
        assert says(template, proxy.registry_url, "gate-licensed", "1.0.0", "license",
                    admitted="0.9.0") in output(done), output(done)
    if journey.name == "npm":  # the others only see that no version matches
        assert ('gate-licensed@1.0.0 declares the license GPL-3.0-only: GPL-3.0-only matches '
                'the license deny list entry "GPL-*"') in output(done)
    assert project.installed(["gate-licensed"]) == {}


def test_a_locked_version_of_a_denied_license_fails_naming_the_license_where_the_client_shows_it(
    journey: Journey, gate: Gate, tmp_path: Path,
) -> None:
    project = fresh_client(journey, tmp_path, "locked-licensed")
    lenient = gate.start(strict=False)
    project.configure(lenient.registry_url)
    project.write_project({"gate-licensed": "1.0.0"})
    assert project.install().returncode == 0
    assert lenient.terminate() == 0
    strict = gate.start(strict=True)  # the same URL, now with the license rule
    project.forget(lockfile=False)

    done = project.install_frozen()

    assert done.returncode != 0, output(done)
    for template in (LOCKED_DENIED_SAYS[journey.name],
                     *LOCKED_WAY_OUT_SAYS.get(journey.name, ())):
        assert says(template, strict.registry_url, "gate-licensed", "1.0.0", "license",
                    admitted="0.9.0", detail="GPL-3.0-only") in output(done), output(done)
    if journey.name == "npm":  # the body's `error`; pnpm and yarn 4 print the status line
        assert "gate-licensed@1.0.0 declares the license GPL-3.0-only" in output(done)
    denials: list[dict[str, Any]] = wait_for(lambda: strict.events("tarball_denied"),
                                              message="tarball_denied")
    assert {(e["package"], e["version"], e["rule"]) for e in denials} == {
        ("gate-licensed", "1.0.0", "license")}
