"""The release signals on the relay: a version's first pull is read against the version before
it, a signal in force cuts the download before its last byte, and every later pull is a 403
with the evidence (docs/serving.md#release-signals).

Each test is an attack the signals stop (the incident shapes of `tests.servers.incidents`) or
a promise they keep: a clean release is served whole, a second pull reads nothing again, an
analysis that cannot finish is said, never a silent pass.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from mirrorgate.rules import LiveRules, parse_rules
from mirrorgate.serve import relay
from tests.serve.rig import RunningProxy, StartProxy
from tests.serve.test_manifest_confusion import read_cut
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.incidents import (
    AXIOS_DEPENDENCY,
    axios_shape,
    chalk_shape,
    entry_file,
    follow_redirects,
    shai_hulud_shape,
)
from tests.servers.packages import (
    FixturePackage,
    fresh_version,
    make_package,
    make_version,
    tarball_path,
)

RULES = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")
"""Every signal at its default (`quarantine`); the fixtures' new versions are minutes old."""


def newest(package: FixturePackage) -> str:
    return package.sorted_versions()[-1]


async def refused_then_403(proxy: RunningProxy, package: FixturePackage) -> dict[str, Any]:
    """The first pull is a 403 (withheld until the verdict), and so is the second, read from
    what the first remembered; the body is returned."""
    path = "npm" + tarball_path(package.name, newest(package))
    first = await proxy.get(path)
    assert first.status == 403, first.body
    again = await proxy.get(path)
    assert again.status == 403, again.body
    body: dict[str, Any] = again.json()
    assert first.json() == body
    return body


async def test_a_patch_release_that_adds_a_postinstall_running_a_new_bundle_is_quarantined(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # Shai-Hulud: 1.4.3 runs `node bundle.js` at install, 1.4.2 ran nothing
    package = shai_hulud_shape()
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, rules=RULES)

    body = await refused_then_403(proxy, package)

    assert body["rule"] == "new-install-script"
    assert body["compared_with"] == "1.4.2"
    assert body["evidence"] == ["postinstall (node bundle.js)"]
    assert "quarantined until" in str(body["reason"])
    assert "1.4.2 ran nothing at install" in str(body["error"])
    assert proxy.metric("mirrorgate_release_checks_total", outcome="refused") == 1
    assert proxy.metric("mirrorgate_rule_denials_total", rule="new-install-script",
                        mode="enforce") >= 1
    assert await proxy.jobs() == []  # nothing refused is mirrored


async def test_an_obfuscated_blob_injected_into_the_entry_file_is_quarantined(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # chalk/debug: the same index.js, with a javascript-obfuscator blob on one line
    package = chalk_shape()
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, rules=RULES)

    body = await refused_then_403(proxy, package)

    assert body["rule"] == "obfuscated-code"
    evidence = [str(item) for item in body["evidence"]]
    assert any(item.startswith("index.js: obfuscator-style `_0x` identifiers") for item in
               evidence)
    assert any("hex or unicode escapes" in item for item in evidence)
    assert all("(not in the same file of 5.6.0)" in item for item in evidence)
    line = len(entry_file("colour-kit").splitlines()) + 1
    assert any(f"at line {line}, byte " in item for item in evidence)


async def test_a_new_dependency_published_the_day_before_is_quarantined(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # axios: 1.14.1 adds plain-crypto-js, first published a day ago
    package, dependency = axios_shape()
    public_registry.add(package, dependency, follow_redirects())
    proxy = await start_proxy(public_registry.url, rules=RULES)

    body = await refused_then_403(proxy, package)

    assert body["rule"] == "new-dependency-young"
    [evidence] = body["evidence"]
    assert evidence.startswith(f"`{AXIOS_DEPENDENCY}` was first published ")
    assert "less than 30 days ago" in evidence
    # the dependency itself is a first version, nothing to compare it with, but a package a
    # day old whose release runs code at install: refused by a signal of its own
    dropper = await proxy.get("npm" + tarball_path(AXIOS_DEPENDENCY, "4.2.1"))
    assert (dropper.status, dropper.json()["rule"]) == (403, "young-package-install-script")
    assert dropper.json()["evidence"] == ["postinstall (node setup.js)"]


async def test_a_dependency_missing_from_the_public_registry_fires_too(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    public_registry.add(make_package("dep-host", [
        make_version("dep-host", "1.0.0", size=0),
        fresh_version("dep-host", "1.0.1", dependencies={"nowhere-to-be-found": "1.0.0"},
                      size=0)]))
    proxy = await start_proxy(public_registry.url, rules=RULES)

    body = await refused_then_403(proxy, public_registry.package("dep-host"))

    assert body["evidence"] == ["`nowhere-to-be-found` is not on the public registry"]


async def test_a_clean_release_is_served_whole_and_its_second_pull_reads_nothing(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    files = {"index.js": entry_file("calm")}
    package = make_package("calm-pkg", [make_version("calm-pkg", "2.0.0", files=files),
                                        make_version("calm-pkg", "2.0.1", files=files)])
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, rules=RULES)
    path = "npm" + tarball_path("calm-pkg", "2.0.1")

    first = await proxy.get(path)
    public_registry.clear_requests()
    second = await proxy.get(path)

    assert first.body == second.body == package.versions["2.0.1"].tarball
    assert proxy.metric("mirrorgate_release_checks_total", outcome="clean") == 1
    fetched = [seen.path for seen in public_registry.requests]
    assert "/calm-pkg/-/calm-pkg-2.0.0.tgz" not in fetched  # the previous one, read once


async def test_report_mode_serves_the_version_and_says_what_would_have_fired(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    package = shai_hulud_shape()
    public_registry.add(package)
    rules = parse_rules('[age]\nminimum = "0"\n\n[release]\nnew_install_script = "report"\n',
                        "rules.toml")
    proxy = await start_proxy(public_registry.url, rules=rules)

    with capture_logs() as logs:
        served = await proxy.get("npm" + tarball_path(package.name, "1.4.3"))

    assert served.status == 200
    assert served.body == package.versions["1.4.3"].tarball
    [line] = [entry for entry in logs if entry["event"] == "version_would_deny"]
    assert line["rule"] == "new-install-script"
    assert "postinstall" in line["reason"]
    assert proxy.metric("mirrorgate_rule_denials_total", rule="new-install-script",
                        mode="report") == 1


async def test_an_allow_entry_releases_a_refused_version_without_reading_it_again(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    package = chalk_shape()
    public_registry.add(package)
    path = tmp_path / "rules.toml"
    path.write_text('[age]\nminimum = "0"\n\n[release]\n', encoding="utf-8")
    rules = LiveRules.load(path)
    proxy = await start_proxy(public_registry.url, rules=rules)
    await refused_then_403(proxy, package)

    path.write_text('[age]\nminimum = "0"\n\n[release]\nallow = ["colour-kit@5.6.1"]\n',
                    encoding="utf-8")
    assert rules.reload()
    public_registry.clear_requests()
    served = await proxy.get("npm" + tarball_path(package.name, "5.6.1"))

    assert served.status == 200
    assert "5.6.1" in (await proxy.get("npm/colour-kit")).json()["versions"]
    fetched = [seen.path for seen in public_registry.requests]
    assert "/colour-kit/-/colour-kit-5.6.0.tgz" not in fetched  # judged again, not read again


async def test_a_previous_version_that_cannot_be_fetched_leaves_the_version_unchecked(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # an outage of the public registry, not the publisher's doing: release.unavailable decides
    package = chalk_shape()
    public_registry.add(package)
    public_registry.fault(tarball_path(package.name, "5.6.0"), Fault(status=503))
    proxy = await start_proxy(public_registry.url, rules=RULES)

    with capture_logs() as logs:
        served = await proxy.get("npm" + tarball_path(package.name, "5.6.1"))

    assert served.status == 200  # release.unavailable defaults to admit: said, not silent
    [line] = [entry for entry in logs if entry["event"] == "release_unchecked"]
    assert "5.6.0's tarball could not be fetched" in line["reason"]
    assert proxy.metric("mirrorgate_release_checks_total", outcome="unchecked") == 1
    page = (await proxy.get("ui/")).body.decode()
    assert "could not check" in page
    assert "colour-kit@5.6.1" in page


async def test_a_postinstall_the_manifest_declares_is_compared_even_when_the_bytes_are_not(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # the previous tarball is unavailable, but the registry manifests alone show 1.4.3 adds
    # a postinstall 1.4.2 did not declare: no "unchecked" pass for it
    package = shai_hulud_shape()
    public_registry.add(package)
    public_registry.fault(tarball_path(package.name, "1.4.2"), Fault(status=503))
    proxy = await start_proxy(public_registry.url, rules=RULES)

    refused = await proxy.get("npm" + tarball_path(package.name, "1.4.3"))

    assert (refused.status, refused.json()["rule"]) == (403, "new-install-script")
    assert refused.json()["evidence"] == ["postinstall (node bundle.js)"]
    assert refused.json()["compared_with"] == "1.4.2"


async def test_unavailable_deny_refuses_a_version_whose_previous_cannot_be_read(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    package = chalk_shape()
    public_registry.add(package)
    public_registry.fault(tarball_path(package.name, "5.6.0"), Fault(status=503))
    rules = parse_rules('[age]\nminimum = "0"\n\n[release]\nunavailable = "deny"\n', "r.toml")
    proxy = await start_proxy(public_registry.url, rules=rules)

    path = "npm" + tarball_path(package.name, "5.6.1")
    first = await proxy.get(path)

    assert first.status == 403
    assert first.json()["rule"] == "release-unchecked"
    assert "5.6.0's tarball could not be fetched" in first.json()["reason"]
    public_registry.clear_faults()  # not remembered: the analysis runs again at the next pull
    again = await proxy.get(path)
    assert again.json()["rule"] == "obfuscated-code"


async def test_a_tarball_too_large_to_withhold_is_cut_before_its_end_and_then_refused(
        public_registry: FixtureRegistry, start_proxy: StartProxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "HOLD_AT_MOST", 1024)  # every fixture tarball is larger
    package = shai_hulud_shape()
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, rules=RULES)
    path = "npm" + tarball_path(package.name, "1.4.3")

    received = await read_cut(proxy, path)

    assert len(received) < len(package.versions["1.4.3"].tarball)  # streamed, then cut
    again = await proxy.get(path)
    assert (again.status, again.json()["rule"]) == (403, "new-install-script")


async def test_a_typosquat_of_a_widely_used_name_published_this_week_is_quarantined(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    public_registry.add(make_package("lodahs", [fresh_version("lodahs", "1.0.0", size=0)]))
    proxy = await start_proxy(public_registry.url, rules=RULES)

    body = await refused_then_403(proxy, public_registry.package("lodahs"))

    assert body["rule"] == "typosquat"
    assert "one edit away from `lodash` (a widely used package)" in str(body["reason"])


async def test_with_typosquat_off_the_same_name_is_served_and_its_verdict_kept_clean(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # the control: a signal that is off neither refuses nor is kept; its firing made the
    # verdict a refusal, held apart and never pushed out (row 13 of the faults table)
    public_registry.add(make_package("lodahs", [fresh_version("lodahs", "1.0.0", size=0)]))
    rules = parse_rules('[age]\nminimum = "0"\n\n[release]\ntyposquat = "off"\n', "rules.toml")
    proxy = await start_proxy(public_registry.url, rules=rules)

    served = await proxy.get("npm" + tarball_path("lodahs", "1.0.0"))

    assert served.status == 200
    verdicts = proxy.proxy.gate.facts.verdicts()
    assert [(kept.name, kept.verdict) for kept in verdicts] == [("lodahs", "clean")]
    assert "typosquat" not in verdicts[0].evidence


async def test_a_refused_version_leaves_the_packument_so_a_range_resolves_to_the_one_before(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    package = chalk_shape()
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, rules=RULES)
    assert "5.6.1" in (await proxy.get("npm/colour-kit")).json()["versions"]  # not read yet

    await refused_then_403(proxy, package)
    document = (await proxy.get("npm/colour-kit")).json()

    assert sorted(document["versions"]) == ["5.6.0"]
    assert document["dist-tags"]["latest"] == "5.6.0"
    denial = document["policyRestrictions"]["denials"]["5.6.1"]
    assert denial["rule"] == "obfuscated-code"
    assert "quarantined until" in denial["reason"]


async def test_a_previous_version_over_the_byte_bound_is_the_publishers_doing_and_refused(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # a padded release would otherwise leave the next one unread: fail closed, remembered
    padding = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(600))
    files = {"index.js": entry_file("padded"), "data.txt": padding.encode()}  # ~20 KB
    package = make_package("padded-kit", [
        make_version("padded-kit", "1.0.0", files=files),
        fresh_version("padded-kit", "1.0.1", files={**files, "README.md": b"# padded\n"})])
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, rules=RULES,
                              release_previous_max_bytes=4096)

    body = await refused_then_403(proxy, package)

    assert body["rule"] == "unreadable-release"
    [evidence] = body["evidence"]
    assert evidence.startswith("1.0.0's tarball was not read: ")
    assert proxy.metric("mirrorgate_release_checks_total", outcome="unchecked") == 0


async def test_a_new_dependency_the_public_registry_fails_to_answer_for_is_still_unchecked(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    # an outage of mirrorgate's own source, not the publisher's doing: release.unavailable
    package, dependency = axios_shape()
    public_registry.add(package, dependency, follow_redirects())
    public_registry.fault(f"/{AXIOS_DEPENDENCY}", Fault(status=503), exact=True)
    proxy = await start_proxy(public_registry.url, rules=RULES)

    with capture_logs() as logs:
        served = await proxy.get("npm" + tarball_path(package.name, "1.14.1"))

    assert served.status == 200  # admitted, and said
    [line] = [entry for entry in logs if entry["event"] == "release_unchecked"]
    assert f"the dependency {AXIOS_DEPENDENCY} " in line["reason"]
