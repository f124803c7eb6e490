"""`mirrorgate sbom` after real installs: two CI jobs sign in with their own OpenID Connect ID
tokens (the loopback issuer of tests/access), install different trees through the real npm
client and a real `mirrorgate serve`, and each job's bill of materials lists exactly what that
job was served, valid against the CycloneDX 1.6 schema (cyclonedx-python-lib's validator).

The failure this guards against is an SBOM that answers "what went into that build" with
another build's packages, or drops one it installed: the audit's whole point.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.access.issuer import AUDIENCE, LoopbackIssuer
from tests.sboms import valid_cyclonedx, valid_spdx
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version
from tests.servers.processes import MirrorgateProcess, mirrorgate_argv

PAYMENTS = "acme/payments-api"
WEB = "acme/web-app"
PACKAGES = [
    make_package("ledger-core", [make_version("ledger-core", "2.1.0", {"money-fmt": "^1.0.0"},
                                              license="Apache-2.0")]),
    make_package("money-fmt", [make_version("money-fmt", "1.4.2", license="MIT")]),
    make_package("@acme-ext/charts", [make_version("@acme-ext/charts", "3.0.0",
                                                   license="(MIT OR GPL-3.0-only)")]),
    make_package("ui-kit", [make_version("ui-kit", "5.0.1", {"money-fmt": "^1.0.0"},
                                         license="ISC")]),
    make_package("legacy-dom", [make_version("legacy-dom", "0.9.0",
                                             licenses=[{"type": "MIT", "url": "x"}])]),
]
PAYMENTS_TREE = {"ledger-core": "2.1.0", "@acme-ext/charts": "3.0.0"}  # + money-fmt
WEB_TREE = {"ui-kit": "5.0.1", "legacy-dom": "0.9.0"}  # + money-fmt, shared with payments


def sbom(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "MIRRORGATE_DATA_DIR": str(data)}
    return subprocess.run([*mirrorgate_argv(), "sbom", *args], env=env, text=True,
                          capture_output=True, timeout=60, check=False)


valid = valid_cyclonedx


def install_as(npm: NpmClient, proxy: MirrorgateProcess, token: str,
               dependencies: dict[str, str]) -> None:
    npm.authenticate(proxy.registry_url, token)
    npm.write_project(dependencies)
    done = npm.install(registry=proxy.registry_url)
    assert done.returncode == 0, done.stderr


def components(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{c['name']}@{c['version']}": c for c in document["components"]}


def properties(component: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


@pytest.fixture
def pulled(mirrorgate: MirrorgateFactory, public_registry: FixtureRegistry,
           tmp_path: Path) -> Path:
    """Both jobs' installs through one `mirrorgate serve`, stopped afterwards (a SIGTERM
    writes the pull log's last records); returns its data directory."""
    public_registry.add(*PACKAGES)
    data = tmp_path / "data"
    with LoopbackIssuer() as issuer:
        tokens = tmp_path / "client-tokens"
        tokens.write_text(
            f"payments-ci {issuer.issuer} repository=acme/payments-* ref=refs/heads/main\n"
            f"web-ci {issuer.issuer} repository=acme/web-* ref=refs/heads/main\n",
            encoding="utf-8")
        proxy = mirrorgate("serve", {
            "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
            "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens),
            "MIRRORGATE_OIDC_AUDIENCE": AUDIENCE, "MIRRORGATE_DATA_DIR": str(data)})
        install_as(NpmClient(tmp_path / "payments"), proxy, issuer.mint(PAYMENTS),
                   PAYMENTS_TREE)
        install_as(NpmClient(tmp_path / "web"), proxy, issuer.mint(WEB), WEB_TREE)
        assert proxy.terminate() == 0
    return data


def test_each_ci_job_gets_exactly_its_own_components_in_a_valid_cyclonedx_document(
        pulled: Path) -> None:
    payments = sbom(pulled, "--repository", PAYMENTS, "--branch", "main")
    web = sbom(pulled, "--client", "web-ci")

    assert payments.returncode == 0, payments.stderr
    assert web.returncode == 0, web.stderr
    payments_bom, web_bom = valid(payments.stdout), valid(web.stdout)
    assert set(components(payments_bom)) == {"ledger-core@2.1.0", "@acme-ext/charts@3.0.0",
                                             "money-fmt@1.4.2"}
    assert set(components(web_bom)) == {"ui-kit@5.0.1", "legacy-dom@0.9.0", "money-fmt@1.4.2"}
    build = payments_bom["metadata"]["component"]
    assert build["name"] == PAYMENTS
    assert properties(build) == {"mirrorgate:ci:repository": PAYMENTS,
                                 "mirrorgate:ci:ref": "refs/heads/main"}


def test_a_component_carries_its_purl_hashes_license_source_and_verdict(pulled: Path) -> None:
    bom = valid(sbom(pulled, "--repository", PAYMENTS, "--workflow", "release").stdout)
    found = components(bom)

    charts = found["@acme-ext/charts@3.0.0"]
    tarball = PACKAGES[2].versions["3.0.0"].tarball
    assert charts["purl"] == "pkg:npm/%40acme-ext/charts@3.0.0"
    assert charts["hashes"] == [
        {"alg": "SHA-512", "content": hashlib.sha512(tarball).hexdigest()},
        {"alg": "SHA-1", "content": hashlib.sha1(tarball, usedforsecurity=False).hexdigest()}]
    assert charts["licenses"] == [{"expression": "MIT OR GPL-3.0-only",
                                   "acknowledgement": "declared"}]
    assert found["ledger-core@2.1.0"]["licenses"] == [
        {"license": {"id": "Apache-2.0", "acknowledgement": "declared"}}]
    said = properties(charts)
    assert said["mirrorgate:served-from"] == "public"
    assert said["mirrorgate:verdict"] == "admitted"
    assert said["mirrorgate:integrity"] == "sha512-" + base64.b64encode(
        hashlib.sha512(tarball).digest()).decode()
    assert said["mirrorgate:pulls"] == "1"


def test_the_same_selection_as_spdx_lists_the_same_packages_and_validates(
        pulled: Path, tmp_path: Path) -> None:
    written = tmp_path / "bom.spdx.json"
    done = sbom(pulled, "--repository", PAYMENTS, "--branch", "main", "--format", "spdx",
                "--output", str(written))

    assert done.returncode == 0, done.stderr
    document = valid_spdx(written)
    assert {f"{p['name']}@{p.get('versionInfo')}" for p in document["packages"]} == {
        f"{PAYMENTS}@None", "ledger-core@2.1.0", "@acme-ext/charts@3.0.0", "money-fmt@1.4.2"}


def test_the_legacy_license_array_is_declared_as_npm_reads_it(pulled: Path) -> None:
    bom = valid(sbom(pulled, "--client", "web-ci").stdout)
    assert components(bom)["legacy-dom@0.9.0"]["licenses"] == [
        {"license": {"id": "MIT", "acknowledgement": "declared"}}]


def test_a_selection_nothing_matches_writes_an_empty_document_and_exits_1(pulled: Path) -> None:
    # the control for "exactly its own": another branch of the same repository pulled nothing
    other = sbom(pulled, "--repository", PAYMENTS, "--branch", "release")

    assert other.returncode == 1
    assert valid(other.stdout)["components"] == []
    assert "no served pull matched" in other.stderr


def test_a_question_that_cannot_be_asked_exits_2_saying_why(tmp_path: Path,
                                                            pulled: Path) -> None:
    assert "say whose build" in sbom(pulled).stderr
    assert sbom(pulled, "--since", "yesterday").returncode == 2
    missing = sbom(tmp_path / "nowhere", "--client", "web-ci")
    assert missing.returncode == 2
    assert "there is no state store at" in missing.stderr


def test_a_time_window_selects_the_pulls_inside_it(pulled: Path) -> None:
    everything = valid(sbom(pulled, "--since", "2000-01-01T00:00Z").stdout)
    before = sbom(pulled, "--since", "2000-01-01T00:00Z", "--until", "2000-01-02T00:00Z")

    assert set(components(everything)) == {"ledger-core@2.1.0", "@acme-ext/charts@3.0.0",
                                           "money-fmt@1.4.2", "ui-kit@5.0.1",
                                           "legacy-dom@0.9.0"}
    assert before.returncode == 1


