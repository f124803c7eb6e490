"""The license rule reading a tarball's own package.json at the relay: manifest confusion over
a license (the registry manifest says MIT, the package.json npm installs says GPL-3.0-only),
refused before a byte leaves, cut when too large to withhold, reported in report mode; and
the worker never mirrors such bytes. Per policy set: a team's rule reads bytes another team's
download left unread, and what a report mode said is read again in enforce mode; bytes the
reader cannot read stay refused. The control beside each: bytes that agree are served.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from structlog.testing import capture_logs

from mirrorgate.npm.tarscripts import MAX_MANIFEST_BYTES
from mirrorgate.rules import parse_rules
from mirrorgate.serve import relay
from tests.npm.tarshapes import END, file
from tests.serve.rig import RunningProxy, StartProxy, policy_tokens
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.licensed import relicensed
from tests.servers.packages import make_package, make_version

RULES = '[license]\ndeny = ["GPL-*"]\n'


async def test_a_tarball_declaring_a_denied_license_under_an_mit_manifest_is_a_403(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    public_registry.add(make_package("lic-hidden", [relicensed("lic-hidden", "GPL-3.0-only")]),
                        make_package("lic-honest", [relicensed("lic-honest", "MIT")]))
    proxy = await start_proxy(public_registry.url, rules=parse_rules(RULES))

    with capture_logs() as logs:
        refused = await proxy.get("npm/lic-hidden/-/lic-hidden-1.0.0.tgz")
        honest = await proxy.get("npm/lic-honest/-/lic-honest-1.0.0.tgz")

    assert refused.status == 403
    assert refused.json()["rule"] == "license"
    assert refused.json()["reason"].startswith(
        "the registry's manifest declares MIT, but the package.json in its tarball, which npm "
        "installs, declares GPL-3.0-only")
    assert honest.status == 200  # the control: the same reading, the same license
    [line] = [entry for entry in logs if entry["event"] == "tarball_license_refused"]
    assert line["package"] == "lic-hidden"
    assert proxy.metric("mirrorgate_rule_denials_total", rule="license", mode="enforce") == 1
    assert [job.name for job in await proxy.jobs()] == ["lic-honest"]


async def test_a_tarball_too_large_to_withhold_is_cut_and_the_next_pull_is_the_403(
        public_registry: FixtureRegistry, start_proxy: StartProxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "HOLD_AT_MOST", 1024)
    version = relicensed("lic-large", "AGPL-3.0-only OR GPL-3.0-only")
    public_registry.add(make_package("lic-large", [version]))
    proxy = await start_proxy(public_registry.url, rules=parse_rules(RULES))

    async with proxy.session.get(proxy.url + "npm/lic-large/-/lic-large-1.0.0.tgz") as answer:
        assert answer.status == 200  # streamed: the status left before the verdict
        received = bytearray()
        with contextlib.suppress(aiohttp.ClientPayloadError):
            async for chunk in answer.content.iter_any():
                received += chunk
    again = await proxy.get("npm/lic-large/-/lic-large-1.0.0.tgz")

    assert len(received) < len(version.tarball)  # cut before its last chunk
    assert again.status == 403
    assert "declares AGPL-3.0-only OR GPL-3.0-only" in again.json()["reason"]
    assert await proxy.jobs() == []


async def test_in_report_mode_the_bytes_are_served_and_the_difference_said(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    public_registry.add(make_package("lic-reported", [relicensed("lic-reported", "ISC")]))
    proxy = await start_proxy(public_registry.url,
                              rules=parse_rules(RULES + 'mode = "report"\n'))

    with capture_logs() as logs:
        served = await proxy.get("npm/lic-reported/-/lic-reported-1.0.0.tgz")

    assert served.status == 200
    [line] = [entry for entry in logs if entry["event"] == "version_would_deny"
              and entry.get("where") == "tarball"]
    assert (line["rule"], line["package"]) == ("license", "lic-reported")
    assert "declares ISC" in line["reason"]
    assert proxy.metric("mirrorgate_rule_denials_total", rule="license", mode="report") == 1


async def test_without_the_license_table_no_tarball_is_read_for_its_license(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    public_registry.add(make_package("lic-unread", [relicensed("lic-unread", "GPL-3.0-only")]))
    proxy = await start_proxy(public_registry.url)

    assert (await proxy.get("npm/lic-unread/-/lic-unread-1.0.0.tgz")).status == 200


TEAMS = """\
[policy.legal.license]
deny = ["GPL-*"]

[policy.trial.license]
mode = "report"
deny = ["GPL-*"]
"""


HIDDEN = "npm/lic-hidden/-/lic-hidden-1.0.0.tgz"
"""An MIT manifest over a tarball whose package.json says GPL-3.0-only (`teams`)."""


async def teams(public_registry: FixtureRegistry, start_proxy: StartProxy,
                tmp_path: Path) -> tuple[RunningProxy, dict[str, str]]:
    """A proxy under `TEAMS` serving `HIDDEN`, and the `Authorization` of a client of each
    set (legal, trial) and of the default rules (web)."""
    public_registry.add(make_package("lic-hidden", [relicensed("lic-hidden", "GPL-3.0-only")]))
    tokens = tmp_path / "client-tokens"
    bearer = policy_tokens(tokens, legal="legal", trial="trial", web=None)
    return await start_proxy(public_registry.url, client_tokens_file=tokens,
                             rules=parse_rules(TEAMS)), bearer


async def test_a_teams_license_rule_reads_the_bytes_another_policys_download_left_spooled(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    # the attack: the web client's rules read no license, so its download of an MIT
    # manifest over a GPL tarball is served and its spool lingers for the requests just
    # after; the legal client's pull of the same bytes, within the linger, must not be served
    # from that unread spool. The control: the web client's own pull after it, still served
    proxy, bearer = await teams(public_registry, start_proxy, tmp_path)

    served = await proxy.get(HIDDEN, Authorization=bearer["web"])
    refused = await proxy.get(HIDDEN, Authorization=bearer["legal"])
    again = await proxy.get(HIDDEN, Authorization=bearer["web"])

    assert served.status == 200
    assert refused.status == 403, refused.body[:300]
    assert refused.json()["rule"] == "license"
    assert "declares GPL-3.0-only" in refused.json()["reason"]
    assert again.status == 200
    downloads = [seen for seen in public_registry.requests if seen.path.endswith(".tgz")]
    assert len(downloads) == 2  # the web client's two pulls share one download


async def test_bytes_a_report_mode_policy_read_are_read_again_and_refused_in_enforce_mode(
        public_registry: FixtureRegistry, start_proxy: StartProxy, tmp_path: Path) -> None:
    # the trial team's report mode serves the GPL tarball and says so; the legal team's
    # enforce mode, pulling the same bytes after, reads them again and refuses them
    proxy, bearer = await teams(public_registry, start_proxy, tmp_path)

    with capture_logs() as logs:
        reported = await proxy.get(HIDDEN, Authorization=bearer["trial"])
        reported_again = await proxy.get(HIDDEN, Authorization=bearer["trial"])
        refused = await proxy.get(HIDDEN, Authorization=bearer["legal"])

    assert (reported.status, reported_again.status) == (200, 200)
    said = [entry for entry in logs if entry["event"] == "version_would_deny"
            and entry.get("where") == "tarball"]
    assert len(said) == 1  # report mode says it once for the same bytes
    assert refused.status == 403, refused.body[:300]
    assert refused.json()["rule"] == "license"


@pytest.mark.parametrize(("mode", "rule"), [("enforce", "license"),
                                            ("report", "unreadable-release")])
async def test_a_tarball_the_reader_cannot_read_stays_refused_whatever_the_license_says(
        mode: str, rule: str, public_registry: FixtureRegistry,
        start_proxy: StartProxy) -> None:
    # a young package's package.json over the reader's bound, its manifest MIT: the license
    # rule's reading refuses it as unreadable, and in report mode the release signals'
    # reading of the same bytes does (the default's unreadable-release); the control, the same
    # package.json under the bound, is served
    published = datetime.now(UTC) - timedelta(days=2)

    def package_json(name: str, size: int) -> bytes:
        document = {"name": name, "version": "1.0.0", "license": "MIT", "description": ""}
        document["description"] = "d" * (size - len(json.dumps(document)))
        return gzip.compress(file("package/package.json", json.dumps(document).encode()) + END,
                             mtime=0)
    for name, size in (("lic-unread", MAX_MANIFEST_BYTES + 1),
                       ("lic-read", MAX_MANIFEST_BYTES - 1024)):
        public_registry.add(make_package(name, [make_version(
            name, "1.0.0", tarball=package_json(name, size), published=published,
            license="MIT", dist={"fileCount": 1, "unpackedSize": size})]))
    proxy = await start_proxy(public_registry.url,
                              rules=parse_rules(f'{RULES}mode = "{mode}"\n'))

    refused = await proxy.get("npm/lic-unread/-/lic-unread-1.0.0.tgz")
    served = await proxy.get("npm/lic-read/-/lic-read-1.0.0.tgz")

    assert refused.status == 403, refused.body[:300]
    assert refused.json()["rule"] == rule
    assert served.status == 200, served.body[:300]
