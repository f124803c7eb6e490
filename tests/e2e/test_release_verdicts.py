"""A release verdict is a record of the version: judged once against a release that was itself
judged, kept in the state store, and honoured by every path that admits or mirrors
(docs/verdicts.md). Through the real npm client, real `mirrorgate serve` processes and real
Verdaccio, against a fixture registry playing the public one.

The attacks: two bad releases published together, the second compared with the first (nothing
new); the same after a restart, or with the first judged by another replica; a version
published below the whole history with `latest` pointed at it; a version flagged in report
mode and mirrored, then enforced; `mirrorgate prewarm` of a lockfile pinning a version the
proxy refuses. Each beside its plain control (one bad release after a clean one, refused) and
a clean release of the same package, admitted.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import shutil
import sqlite3
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mirrorgate.gate.kept.facts import POLL
from mirrorgate.mirror import encode_job
from tests.commands.mirrored import run_command
from tests.e2e.sidecar import registry_environment, start_sidecar
from tests.e2e.test_untrusted_queue import send_raw
from tests.faults.worker_jobs import admitted_job
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.incidents import (
    _fresh,
    entry_file,
    minified_bundle,
    shai_hulud_shape,
)
from tests.servers.npm import NpmClient
from tests.servers.packages import (
    EPOCH,
    FixturePackage,
    iso,
    make_package,
    make_version,
    tarball_path,
)
from tests.servers.postgres_server import PostgresServer
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.servers.verdaccio import Verdaccio

RULES = '[age]\nminimum = "0"\n\n[release]\n'
"""Every signal at its default action (`quarantine`), the cooldown off so the signals, not the
age rule, refuse the minutes-old versions."""
REPORT = RULES + 'mode = "report"\n'
HOOK = "new-install-script"


def burst_shape(name: str = "burst-host") -> FixturePackage:
    """1.4.1 and 1.4.2 run nothing at install; 1.4.3 and 1.4.4, published a minute apart a
    few minutes ago, both run `node bundle.js`, the same new 1.5 MB bundle."""
    files = {"index.js": entry_file(name), "README.md": b"# burst host\n"}
    bad = {**files, "bundle.js": minified_bundle(1_500_000)}
    hook = {"postinstall": "node bundle.js"}
    return make_package(name, [
        make_version(name, "1.4.1", files=files, published=EPOCH - timedelta(days=30)),
        make_version(name, "1.4.2", files=files, published=EPOCH),
        make_version(name, "1.4.3", files=bad, published=_fresh(timedelta(minutes=6)),
                     scripts=hook),
        make_version(name, "1.4.4", files=bad, published=_fresh(timedelta(minutes=5)),
                     scripts=hook)])


def below_shape(name: str = "below-host") -> FixturePackage:
    """1.0.0 to 1.2.0, clean and long published; 0.0.1, published minutes ago below the whole
    history with a new postinstall bundle, and `latest` pointed at it."""
    files = {"index.js": entry_file(name), "README.md": b"# below host\n"}
    history = [make_version(name, version, files=files, published=EPOCH + timedelta(days=day))
               for day, version in enumerate(("1.0.0", "1.1.0", "1.2.0"))]
    low = make_version(name, "0.0.1", files={**files, "bundle.js": minified_bundle(1_500_000)},
                       published=_fresh(), scripts={"postinstall": "node bundle.js"})
    return make_package(name, [*history, low], dist_tags={"latest": "0.0.1"})


def serve(mirrorgate: MirrorgateFactory, public: FixtureRegistry, verdaccio: Verdaccio,
          data: Path, rules: Path, **extra: str) -> MirrorgateProcess:
    if not rules.exists():
        rules.write_text(RULES, encoding="utf-8")
    return mirrorgate("serve", {
        **registry_environment(public, verdaccio), "MIRRORGATE_METRICS_OPEN": "true",
        "MIRRORGATE_RULES_FILE": str(rules), "MIRRORGATE_DATA_DIR": str(data), **extra})


def install(npm: NpmClient, proxy: MirrorgateProcess,
            dependencies: dict[str, str]) -> subprocess.CompletedProcess[str]:
    npm.clear_cache()
    # a fresh resolution each time: no lockfile, nothing installed before
    shutil.rmtree(npm.project / "node_modules", ignore_errors=True)
    (npm.project / "package-lock.json").unlink(missing_ok=True)
    npm.write_project(dependencies)
    return npm.install(registry=proxy.registry_url)


def refused(npm: NpmClient, proxy: MirrorgateProcess, name: str, wanted: str) -> None:
    done = install(npm, proxy, {name: wanted})
    assert done.returncode != 0, done.stdout
    assert "E403" in done.stderr, done.stderr


def refusals(proxy: MirrorgateProcess, name: str) -> dict[str, dict[str, object]]:
    """The release signals' refusals of `name` this process logged, by version."""
    return {str(event["version"]): event for event in proxy.events("release_signal_refused")
            if event["package"] == name}


def tarball_reads(public: FixtureRegistry, name: str, version: str) -> int:
    return sum(1 for seen in public.requests
               if seen.path.startswith(f"/{name}/-/{name}-{version}.tgz"))


def test_two_bad_releases_published_together_never_vouch_for_each_other(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(burst_shape(), shai_hulud_shape())
    proxy = serve(mirrorgate, public_registry, verdaccio, tmp_path / "data",
                  tmp_path / "rules.toml")

    refused(npm_client, proxy, "burst-host", "^1.4.0")  # takes 1.4.4

    found = refusals(proxy, "burst-host")
    # 1.4.3, never judged, was read and judged first against 1.4.2, and found bad: so 1.4.4
    # is compared with 1.4.2, where its postinstall is new
    assert (found["1.4.3"]["rule"], found["1.4.3"]["compared_with"]) == (HOOK, "1.4.2")
    assert (found["1.4.4"]["rule"], found["1.4.4"]["compared_with"]) == (HOOK, "1.4.2")
    assert any("postinstall" in str(item) for item in found["1.4.4"]["evidence"])  # type: ignore[attr-defined]
    passed = [event for event in proxy.events("release_baseline_passed_over")
              if event["version"] == "1.4.4"]
    assert passed
    assert passed[0]["passed_over"] == ["1.4.3"]

    again = install(npm_client, proxy, {"burst-host": "^1.4.0"})
    assert again.returncode == 0, again.stderr
    assert npm_client.installed()["burst-host"] == "1.4.2"  # the clean release, admitted
    refused(npm_client, proxy, "worm-host", "^1.4.0")  # the plain control
    assert refusals(proxy, "worm-host")["1.4.3"]["compared_with"] == "1.4.2"


def test_a_refusal_kept_before_a_restart_is_neither_forgotten_nor_read_again(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(burst_shape())
    data, rules = tmp_path / "data", tmp_path / "rules.toml"
    first = serve(mirrorgate, public_registry, verdaccio, data, rules)
    refused(npm_client, first, "burst-host", "1.4.3")
    assert refusals(first, "burst-host")["1.4.3"]["compared_with"] == "1.4.2"
    assert first.running.stop(timeout=15) == 0  # SIGTERM: what was learned is written
    public_registry.clear_requests()

    second = serve(mirrorgate, public_registry, verdaccio, data, rules)  # the same SQLite
    refused(npm_client, second, "burst-host", "^1.4.0")

    found = refusals(second, "burst-host")
    assert set(found) == {"1.4.4"}  # 1.4.3's refusal came from the store, not a new read
    assert found["1.4.4"]["compared_with"] == "1.4.2"
    assert tarball_reads(public_registry, "burst-host", "1.4.3") == 0
    assert second.get("npm/burst-host/1.4.3").status == 403
    again = install(npm_client, second, {"burst-host": "^1.4.0"})
    assert again.returncode == 0, again.stderr
    assert npm_client.installed()["burst-host"] == "1.4.2"


def test_two_replicas_on_one_postgresql_agree_on_a_refusal_either_read(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, postgres_server: PostgresServer, tmp_path: Path,
) -> None:
    public_registry.add(burst_shape())
    database = postgres_server.new_database_now()
    rules = tmp_path / "rules.toml"
    one = serve(mirrorgate, public_registry, verdaccio, tmp_path / "one", rules,
                MIRRORGATE_DATABASE_URL=database)
    other = serve(mirrorgate, public_registry, verdaccio, tmp_path / "two", rules,
                  MIRRORGATE_DATABASE_URL=database)
    assert other.get("npm/burst-host/1.4.3").status == 200  # cached here, before the verdict

    refused(npm_client, one, "burst-host", "1.4.3")
    wait_for(lambda: other.get("npm/burst-host/1.4.3").status == 403, timeout=10,
             message="the other replica to refuse 1.4.3 from the store")
    public_registry.clear_requests()
    refused(npm_client, other, "burst-host", "^1.4.0")

    assert set(refusals(other, "burst-host")) == {"1.4.4"}
    assert refusals(other, "burst-host")["1.4.4"]["compared_with"] == "1.4.2"
    assert tarball_reads(public_registry, "burst-host", "1.4.3") == 0
    wait_for(lambda: one.get("npm/burst-host/1.4.4").status == 403, timeout=10,
             message="the first replica to refuse 1.4.4 from the store")
    for replica in (one, other):
        assert sorted(replica.get("npm/burst-host").json()["versions"]) == ["1.4.1", "1.4.2"]


def test_a_version_published_below_the_whole_history_is_compared_with_the_one_before_it(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(below_shape(), shai_hulud_shape())
    proxy = serve(mirrorgate, public_registry, verdaccio, tmp_path / "data",
                  tmp_path / "rules.toml")

    refused(npm_client, proxy, "below-host", "latest")

    found = refusals(proxy, "below-host")["0.0.1"]
    assert (found["rule"], found["compared_with"]) == (HOOK, "1.2.0")  # published before it
    clean = install(npm_client, proxy, {"below-host": "^1.0.0"})
    assert clean.returncode == 0, clean.stderr
    assert npm_client.installed()["below-host"] == "1.2.0"
    refused(npm_client, proxy, "worm-host", "^1.4.0")  # the plain control


# --- a verdict is bound to the bytes it read (issue 53) -----------------------------------------


def rebyted(name: str, *, hook: bool) -> FixturePackage:
    """A package first published five days ago (young, past the default one-day cooldown):
    1.0.0, then 1.0.1 two days ago, neither running anything at install. `hook`: 1.0.1 listed
    again with other bytes, whose package.json (and registry manifest) run `node setup.js`."""
    files = {"index.js": entry_file(name), "README.md": b"# rebyte kit\n"}
    extra: dict[str, Any] = {}
    later = files
    if hook:
        later = {**files, "setup.js": b"require('child_process').exec('id');\n"}
        extra["scripts"] = {"postinstall": "node setup.js"}
    return make_package(name, [
        make_version(name, "1.0.0", files=files, published=_fresh(timedelta(days=5))),
        make_version(name, "1.0.1", files=later, published=_fresh(timedelta(days=2)),
                     **extra)])


def serve_default(mirrorgate: MirrorgateFactory, public: FixtureRegistry, verdaccio: Verdaccio,
                  tmp_path: Path) -> MirrorgateProcess:
    """`mirrorgate serve` with no rules file (the capability signals on), mirroring to
    a directory the private registry does not read: what it admitted stays public's to serve,
    so public's listing of a version, not a mirrored copy, is what each pull gets. Every
    packument is revalidated (a TTL of 0): a republish reaches the next pull."""
    return mirrorgate("serve", {
        **registry_environment(public, verdaccio), "MIRRORGATE_METRICS_OPEN": "true",
        "MIRRORGATE_DATA_DIR": str(tmp_path / "data"), "MIRRORGATE_CACHE_TTL": "0",
        "MIRRORGATE_MIRROR_TARGET": f"file://{tmp_path / 'mirror'}"})


def checked(proxy: MirrorgateProcess, name: str, version: str) -> int:
    """How many times the release signals read and judged `name@version`'s bytes."""
    return sum(1 for event in proxy.events("release_checked")
               if (event["package"], event["version"]) == (name, version)) + len(
        [event for event in proxy.events("release_signal_refused")
         if (event["package"], event["version"]) == (name, version)])


def test_other_bytes_listed_under_a_version_judged_clean_are_judged_afresh_not_vouched_for(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # the attack: a young release is judged clean, then the registry lists the same version
    # with other bytes (a new dist.integrity) that carry a postinstall. A verdict kept by
    # name and version alone vouched for them unread.
    name = "rebyte-kit"
    original = rebyted(name, hook=False)
    public_registry.add(original)
    proxy = serve_default(mirrorgate, public_registry, verdaccio, tmp_path)
    first = install(npm_client, proxy, {name: "1.0.1"})
    assert first.returncode == 0, first.stderr
    assert checked(proxy, name, "1.0.1") == 1  # read and judged clean (a young package)

    swapped = rebyted(name, hook=True)
    assert swapped.version("1.0.1").integrity != original.version("1.0.1").integrity
    public_registry.add(swapped)
    refused(npm_client, proxy, name, "1.0.1")

    [refusal] = refusals(proxy, name).values()
    # the default's capability signals: its install code gains processes over 1.0.0's
    assert (refusal["version"], refusal["rule"]) == ("1.0.1", "new-capability")
    evidence = [str(item) for item in refusal["evidence"]]  # type: ignore[attr-defined]
    assert "setup.js:1 `require('child_process')" in evidence[0]
    assert proxy.get(f"npm/{name}/-/{name}-1.0.1.tgz").status == 403

    # the control: the bytes judged clean, listed again, are served on their own verdict,
    # not read again, and the refusal of the others does not reach them
    public_registry.add(original)
    again = install(npm_client, proxy, {name: "1.0.1"})
    assert again.returncode == 0, again.stderr
    assert npm_client.installed()[name] == "1.0.1"
    assert checked(proxy, name, "1.0.1") == 2  # the clean read, the refused one: no third
    assert not (npm_client.project / "node_modules" / name / "setup.js").exists()


# --- a verdict is bound to the rules that made it (issue 53) ---------------------------------


def encoded_blob(seed: str) -> bytes:
    """A payload carried as a quoted base64 literal of 8 KB, assigned and never run: a mark
    `obfuscated-code` reads, and nothing the code can do (no capability the default's signals
    read). javascript-obfuscator's own shape (`obfuscated_blob`) the default refuses at once
    since issue 55 (`new-capability`: load-time code gains obfuscated)."""
    data = b"".join(hashlib.sha256(f"{seed}{i}".encode()).digest() for i in range(200))
    return b"const payload = '" + base64.b64encode(data) + b"';\n"


def young_kit(name: str, *, blob: bool) -> FixturePackage:
    """A package first published ten days ago (young; past the default cooldown): 1.0.0, and
    1.0.1 two days ago, `blob`: its entry file with a base64 payload appended. Neither runs
    anything at install nor can do anything at load: the default's capability signals read
    them and find nothing."""
    entry = entry_file(name)
    return make_package(name, [
        make_version(name, "1.0.0", files={"index.js": entry},
                     published=_fresh(timedelta(days=10))),
        make_version(name, "1.0.1", files={"index.js": entry + (encoded_blob(name) if blob
                                                                 else b"// 1.0.1\n")},
                     published=_fresh(timedelta(days=2)))])


def test_a_verdict_kept_under_fewer_signals_is_read_again_once_every_signal_is_on(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # the attack: 1.0.1 kept "clean" under the default (the capability signals, no baseline
    # read: its code can do nothing it could have gained), mirrored; the operator then turns
    # every signal on. Its encoded payload was never compared, and the verdict vouched for it
    # from the mirror, while the same shape first pulled after the change is refused.
    public_registry.add(young_kit("young-blob", blob=True), young_kit("young-late", blob=True),
                        young_kit("young-plain", blob=False), old("deny-probe"))
    rules = tmp_path / "rules.toml"
    rules.write_text("# the defaults\n", encoding="utf-8")
    proxy = serve(mirrorgate, public_registry, verdaccio, tmp_path / "data", rules)
    for name in ("young-blob", "young-plain"):
        served = install(npm_client, proxy, {name: "1.0.1"})
        assert served.returncode == 0, served.stderr
        assert checked(proxy, name, "1.0.1") == 1  # read: every first pull is
        wait_for(lambda name=name: "1.0.1" in verdaccio.versions(name),  # type: ignore[misc]
                 timeout=60, message=f"the worker to mirror {name}@1.0.1")

    # an unrelated reload (a deny entry) changes no signal: nothing is read again
    rules.write_text('[deny]\npackages = ["deny-probe"]\n', encoding="utf-8")
    wait_for(lambda: proxy.get(PROBE).status == 403, timeout=15, message="the deny entry")
    again = install(npm_client, proxy, {"young-blob": "1.0.1"})
    assert again.returncode == 0, again.stderr
    assert checked(proxy, "young-blob", "1.0.1") == 1

    rules.write_text(RULES, encoding="utf-8")  # every signal on
    wait_for(lambda: proxy.get(PROBE).status == 200, timeout=15, message="every signal on")
    refused(npm_client, proxy, "young-blob", "1.0.1")  # read again, from the mirror
    refusal = refusals(proxy, "young-blob")["1.0.1"]
    assert (refusal["rule"], refusal["compared_with"]) == ("obfuscated-code", "1.0.0")
    assert proxy.get("npm/young-blob/-/young-blob-1.0.1.tgz").status == 403

    # the controls: the same shape first pulled now, refused alike; a clean release kept
    # under the default, read again, still installs (and is not read a third time)
    refused(npm_client, proxy, "young-late", "1.0.1")
    assert refusals(proxy, "young-late")["1.0.1"]["rule"] == "obfuscated-code"
    for _ in range(2):
        plain = install(npm_client, proxy, {"young-plain": "1.0.1"})
        assert plain.returncode == 0, plain.stderr
    assert checked(proxy, "young-plain", "1.0.1") == 2


PROBE = "npm/deny-probe/-/deny-probe-1.3.0.tgz"


def old(name: str) -> FixturePackage:
    return make_package(name, [make_version(name, "1.3.0", published=EPOCH, size=0)])


# --- time as evidence (issue 53) ----------------------------------------------------------------


def rewritten(name: str, time: dict[str, object] | None,
              age: timedelta = timedelta(0)) -> FixturePackage:
    """A package really first published two days ago (and `age` before that): 1.0.0, then
    1.0.1 a day and a half ago, both running `node setup.js` at install, which fetches a
    file (the network: what a young package's install code may not reach, and 1.0.1 gains
    nothing over 1.0.0, so only the package's age holds it); its `time` as a registry in
    front rewrote it (None: as published)."""
    files = {"index.js": entry_file(name),
             "setup.js": b"require('https').get('https://files.invalid/setup.bin');\n"}
    hook = {"postinstall": "node setup.js"}
    package = make_package(name, [
        make_version(name, "1.0.0", files=files, published=_fresh(age + timedelta(days=2)),
                     scripts=hook),
        make_version(name, "1.0.1", files=files, published=_fresh(age + timedelta(hours=36)),
                     scripts=hook)])
    if time is not None:
        package.fields["time"] = time
    return package


def iso_ago(**delta: float) -> str:
    return iso(_fresh(timedelta(**delta)))


TIMES: dict[str, dict[str, object]] = {
    # a registry that writes none but `modified`
    "times-missing": {"modified": iso_ago(hours=1)},
    # text no calendar reads, a number, `created` garbled
    "times-garbled": {"created": "yesterday", "1.0.0": 1_700_000_000, "1.0.1": "last week",
                      "modified": iso_ago(hours=1)},
    # `created`, and a version no longer listed, 400 days back
    "times-created-back": {"created": iso_ago(days=400), "0.0.1": iso_ago(days=400),
                           "1.0.0": iso_ago(days=2), "1.0.1": iso_ago(hours=36),
                           "modified": iso_ago(hours=36)},
    # a version "published" before the package was created
    "times-before-created": {"created": iso_ago(days=2), "1.0.0": iso_ago(days=400),
                             "1.0.1": iso_ago(hours=36), "modified": iso_ago(hours=36)},
    # offsets past the ends of the calendar: once a 500 for the whole package
    "times-overflowing": {"created": "0001-01-01T00:00:00+01:00",
                          "1.0.0": "9999-12-31T23:59:59-23:59",
                          "1.0.1": "9999-12-31T23:59:59-23:59", "modified": iso_ago(hours=1)},
}


def test_times_missing_garbled_or_contradicting_never_make_a_young_package_old(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # the attack: a two-day-old package's 1.0.1 runs code at install; its registry's times,
    # missing, unreadable, or 400 days back, once made it "old", and the young-package
    # signal (on by default, now young-package-capability) did not read it as young; an
    # overflowing offset answered 500
    for name, time in TIMES.items():
        public_registry.add(rewritten(name, time))
    public_registry.add(rewritten("times-kept", None))  # the plain shape, times as published
    public_registry.add(rewritten("times-old", None, age=timedelta(days=400)))
    proxy = serve_default(mirrorgate, public_registry, verdaccio, tmp_path)

    for name in [*TIMES, "times-kept"]:
        assert proxy.get(f"npm/{name}").status == 200, name  # never a 500
        refused(npm_client, proxy, name, "1.0.1")
        refusal = refusals(proxy, name)["1.0.1"]
        assert refusal["rule"] == "young-package-capability", name
        evidence = [str(item) for item in refusal["evidence"]]  # type: ignore[attr-defined]
        assert evidence == ["install-time code can use network (reaches the network): "
                            "setup.js:1 `require('https')`"], name
    said = {name: refusals(proxy, name)["1.0.1"] for name in TIMES}
    doubts = {name: [str(doubt) for doubt in said[name]["times"]]  # type: ignore[attr-defined]
              for name in TIMES}
    for name in ("times-missing", "times-garbled", "times-overflowing"):
        assert "first publish cannot be established" in str(said[name]["reason"]), name
        assert doubts[name][0] == ("no version it lists carries a publish time mirrorgate can "
                                   "read, so its age cannot be established"), name
        # its quarantine runs from its first read, and does not move with each pull
        assert doubts[name][1].startswith("1.0.1 has no publish time"), name
        tarball = f"npm/{name}/-/{name}-1.0.1.tgz"
        first, second = proxy.get(tarball), proxy.get(tarball)
        assert first.status == second.status == 403, name
        assert first.json()["until"] == second.json()["until"], name
    assert "first published " + iso_ago(days=2)[:10] in str(said["times-created-back"]["reason"])
    [doubt] = doubts["times-before-created"]
    assert doubt.startswith("1.0.0 was \"published\" ")
    assert "before the package was created" in doubt
    assert not proxy.events("request_failed")

    # the control: an old package's same install hook, gaining nothing over the release
    # before it, is read (every first pull is) and not refused
    installed = install(npm_client, proxy, {"times-old": "1.0.1"})
    assert installed.returncode == 0, installed.stderr
    assert refusals(proxy, "times-old") == {}
    assert checked(proxy, "times-old", "1.0.1") == 1


def copied(name: str, *, hook: bool) -> FixturePackage:
    """A package a registry in front stamped with the days it copied each version, within a
    few days of each other weeks ago and in no order (2.1.1 "published" before 2.1.0, 2.0.0
    after 2.1.0, 2.2.0 a day after 2.0.0); `hook`: 2.2.0 adds a postinstall."""
    files = {"index.js": entry_file(name), "README.md": b"# copied kit\n"}
    stamps = {"1.9.0": 30, "2.0.0": 26, "2.1.0": 27, "2.1.1": 28, "2.2.0": 25}
    return make_package(name, [
        make_version(name, version, files=files, published=_fresh(timedelta(days=age)),
                     scripts={"postinstall": "node -e 0"} if hook and version == "2.2.0"
                     else {})
        for version, age in stamps.items()])


def long_history(name: str, *, hook: bool) -> FixturePackage:
    """60 clean releases over two months (1.0.0 to 1.5.9), then 1.6.0 minutes ago: with a new
    postinstall bundle (`hook`), or clean."""
    files = {"index.js": entry_file(name), "README.md": b"# long history\n"}
    history = [make_version(name, f"1.{n // 10}.{n % 10}", files=files,
                            published=EPOCH + timedelta(days=n)) for n in range(60)]
    new = (make_version(name, "1.6.0", files={**files, "bundle.js": minified_bundle(400_000)},
                        published=_fresh(), scripts={"postinstall": "node bundle.js"})
           if hook else make_version(name, "1.6.0", files=files, published=_fresh()))
    return make_package(name, [*history, new])


def test_a_tarball_pulled_alone_is_compared_with_the_release_before_it_without_gating_all(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, mirrorgate: MirrorgateFactory,
    tmp_path: Path,
) -> None:
    # `npm ci` asks for tarballs alone: the release before it is found among the releases gated one
    # at a time as the walk reaches them (`gate.packuments.lazyhistory`), never by gating the 61
    # versions of the packument, and the new hook is refused against it all the same
    public_registry.add(long_history("long-hook", hook=True),
                        long_history("long-clean", hook=False))
    proxy = serve(mirrorgate, public_registry, verdaccio, tmp_path / "data",
                  tmp_path / "rules.toml")

    bad = http_request("GET", proxy.registry_url + tarball_path("long-hook", "1.6.0")[1:])
    clean = http_request("GET", proxy.registry_url + tarball_path("long-clean", "1.6.0")[1:])

    assert bad.status == 403, bad.body[:300]
    refusal = wait_for(lambda: refusals(proxy, "long-hook").get("1.6.0"))
    assert refusal is not None
    assert (refusal["rule"], refusal["compared_with"]) == (HOOK, "1.5.9")
    assert clean.status == 200  # the control: compared with the same release, admitted
    [judged] = wait_for(lambda: [event for event in proxy.events("release_checked")
                                 if event["package"] == "long-clean"])
    assert (judged["outcome"], judged["compared_with"]) == ("clean", "1.5.9")
    filled = [event["versions"] for event in proxy.events("packument_filled")]
    assert filled
    assert max(filled) == 1  # each fill judged the tarball's own version alone
    # ... which a packument's request would not: the log counts what was gated
    document = http_request("GET", proxy.registry_url + "long-clean")
    assert document.status == 200
    wait_for(lambda: any(event["versions"] == 61
                         for event in proxy.events("packument_filled")), 10.0,
             message="the packument's fill logged")


def test_where_times_contradict_version_order_a_release_is_compared_with_the_one_below_it(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # every signal on (a new hook denied: the stamps are weeks old, and a quarantine would
    # have ended): by the copy stamps the releases before 2.2.0 were never judged and within
    # a week of it, so a walk by time read three and stopped, the clean release refused as
    # release-unchecked; by version order, 2.1.1 is below it, public for weeks
    public_registry.add(copied("copied-hook", hook=True), copied("copied-clean", hook=False))
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES + 'new_install_script = "deny"\n', encoding="utf-8")
    proxy = serve(mirrorgate, public_registry, verdaccio, tmp_path / "data", rules)

    refused(npm_client, proxy, "copied-hook", "2.2.0")
    refusal = refusals(proxy, "copied-hook")["2.2.0"]
    assert (refusal["rule"], refusal["compared_with"]) == (HOOK, "2.1.1")
    assert "after 2.1.1" in str(refusal["times"])  # named: why version order chose it

    clean = install(npm_client, proxy, {"copied-clean": "2.2.0"})  # the control
    assert clean.returncode == 0, clean.stderr
    [judged] = [event for event in proxy.events("release_checked")
                if event["package"] == "copied-clean"]
    assert (judged["outcome"], judged["compared_with"]) == ("clean", "2.1.1")
    assert not proxy.events("release_unsettled")


def test_a_version_flagged_in_report_mode_and_mirrored_is_refused_from_the_mirror_once_enforced(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    public_registry.add(shai_hulud_shape())
    rules = tmp_path / "rules.toml"
    rules.write_text(REPORT, encoding="utf-8")
    proxy = serve(mirrorgate, public_registry, verdaccio, tmp_path / "data", rules)

    served = install(npm_client, proxy, {"worm-host": "1.4.3"})
    assert served.returncode == 0, served.stderr  # report mode: served, and said so
    assert any(event["package"] == "worm-host" and event["rule"] == HOOK
               for event in proxy.events("version_would_deny"))
    wait_for(lambda: "1.4.3" in verdaccio.versions("worm-host"), timeout=60,
             message="the worker to mirror worm-host@1.4.3")

    # enforced, re-read without a restart (a comment added: the file in force cut short is
    # refused as a truncated save)
    rules.write_text(RULES + "# enforced now\n", encoding="utf-8")
    wait_for(lambda: proxy.get("npm/worm-host/1.4.3").status == 403, timeout=15,
             message="the rules change to reach the mirrored copy")
    # the lockfile written in report mode pins 1.4.3: `npm ci` asks for the mirrored tarball
    npm_client.clear_cache()
    shutil.rmtree(npm_client.project / "node_modules")
    pinned = npm_client.ci(registry=proxy.registry_url)
    assert pinned.returncode != 0, pinned.stdout
    assert "E403" in pinned.stderr, pinned.stderr

    assert "1.4.3" in verdaccio.versions("worm-host")  # in the mirror, and never served
    answer = proxy.get("npm/worm-host/-/worm-host-1.4.3.tgz")
    assert answer.status == 403
    body = answer.json()
    assert (body["rule"], body["compared_with"]) == (HOOK, "1.4.2")
    assert body["evidence"] == ["postinstall (node bundle.js)"]
    refused(npm_client, proxy, "worm-host", "1.4.3")  # a fresh resolution, as before
    clean = install(npm_client, proxy, {"worm-host": "^1.4.0"})
    assert clean.returncode == 0, clean.stderr
    assert npm_client.installed()["worm-host"] == "1.4.2"


def test_prewarm_of_a_lockfile_pinning_a_refused_version_publishes_nothing_and_says_so(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    tmp_path: Path,
) -> None:
    public_registry.add(shai_hulud_shape())
    npm_client.write_project({"worm-host": "1.4.3"})
    locked = npm_client.install(registry=public_registry.url)  # the lockfile, from public
    assert locked.returncode == 0, locked.stderr
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    env = {**registry_environment(public_registry, verdaccio),
           "MIRRORGATE_RULES_FILE": str(rules)}

    done = run_command(["prewarm", str(npm_client.project / "package-lock.json"), "--json"],
                       env, tmp_path)

    report = json.loads(done.stdout)
    assert done.statuses() == {"worm-host@1.4.3": "refused"}, done.stdout
    [result] = report["results"]
    assert HOOK in result["reason"]
    assert "1.4.2" in result["reason"]
    assert "1.4.3" not in verdaccio.versions("worm-host")

    npm_client.write_project({"worm-host": "1.4.2"})  # a clean release of the same package
    clean = npm_client.install(registry=public_registry.url)
    assert clean.returncode == 0, clean.stderr
    warmed = run_command(["prewarm", str(npm_client.project / "package-lock.json"), "--json"],
                         env, tmp_path)
    assert warmed.statuses() == {"worm-host@1.4.2": "published"}, warmed.stdout


def test_check_of_a_lockfile_pinning_a_refused_version_names_the_signal_and_evidence(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    tmp_path: Path,
) -> None:
    public_registry.add(burst_shape())
    npm_client.write_project({"burst-host": "1.4.4"})
    locked = npm_client.install(registry=public_registry.url)
    assert locked.returncode == 0, locked.stderr
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    env = {**registry_environment(public_registry, verdaccio),
           "MIRRORGATE_RULES_FILE": str(rules)}
    lockfile = str(npm_client.project / "package-lock.json")

    done = run_command(["check", lockfile, "--json"], env, tmp_path)

    assert done.returncode == 1, done.stderr
    [result] = done.json()["results"]
    assert (result["status"], result["rule"]) == ("denied", HOOK)
    assert "compared with 1.4.2" in result["reason"]  # 1.4.3, published with it, judged bad

    npm_client.write_project({"burst-host": "1.4.2"})  # a clean release of the same package
    clean = npm_client.install(registry=public_registry.url)
    assert clean.returncode == 0, clean.stderr
    admitted = run_command(["check", lockfile, "--json"], env, tmp_path)
    assert admitted.returncode == 0, admitted.stdout
    assert admitted.statuses() == {"burst-host@1.4.2": "admitted"}


def kept_in(data: Path, name: str, version: str) -> bool:
    """Whether the SQLite store in `data` holds a verdict on `name@version` (read-only)."""
    with contextlib.closing(sqlite3.connect(f"file:{data / 'state.sqlite3'}?mode=ro",
                                            uri=True)) as db:
        found = db.execute("SELECT 1 FROM verdicts WHERE name = ? AND version = ?",
                           (name, version)).fetchone()
    return found is not None


@pytest.mark.parametrize("queue_backend", ["sqs"], indirect=True)
async def test_the_sidecar_worker_on_the_same_sqlite_retires_a_job_the_proxy_refused_unread(
    queue_backend: str, queue_environment: dict[str, str], public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, mirrorgate: MirrorgateFactory,
    tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """The proxy and its sidecar worker, two processes on one volume's SQLite file: the job a
    queue writer sends for the version the proxy refused is retired on the proxy's verdict,
    its tarball never fetched by the worker."""
    public_registry.add(shai_hulud_shape())
    rules, data = tmp_path / "rules.toml", tmp_path / "volume"
    rules.write_text(RULES, encoding="utf-8")
    env = {**registry_environment(public_registry, verdaccio), **queue_environment,
           "MIRRORGATE_RULES_FILE": str(rules), "MIRRORGATE_DATA_DIR": str(data),
           "MIRRORGATE_METRICS_OPEN": "true"}
    pod = start_sidecar(mirrorgate, env)
    refused(npm_client, pod.proxy, "worm-host", "1.4.3")
    wait_for(lambda: kept_in(data, "worm-host", "1.4.3"), timeout=10,
             message="the proxy's verdict to reach the SQLite file")
    # ... and the sidecar's own look at the file (every `POLL`): a job within one poll of the
    # verdict finds none and is judged by the worker, reading the bytes (the same refusal)
    await asyncio.sleep(4 * POLL)
    public_registry.clear_requests()

    await send_raw(queue_backend, env, request,
                   encode_job(admitted_job(public_registry, "worm-host", "1.4.3")))

    wait_for(lambda: pod.worker.metric("mirrorgate_jobs_retired_total",
                                       reason="release-signal") == 1,
             timeout=30, message="the worker to retire the job on the proxy's verdict")
    assert tarball_reads(public_registry, "worm-host", "1.4.3") == 0
    assert "1.4.3" not in verdaccio.versions("worm-host")
    clean = install(npm_client, pod.proxy, {"worm-host": "^1.4.0"})  # the clean release
    assert clean.returncode == 0, clean.stderr
    wait_for(lambda: "1.4.2" in verdaccio.versions("worm-host"), timeout=30,
             message="the sidecar to mirror worm-host@1.4.2")
