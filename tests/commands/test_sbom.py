"""The documents `mirrorgate sbom` writes, from pull log records: every shape a component
takes is held to the CycloneDX 1.6 schema (cyclonedx-python-lib's strict validator) and, as
SPDX 2.3, to spdx-tools' validator; the fields Dependency-Track reads (purl, hashes, licenses)
are what npm's own sbom says.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from mirrorgate.commands.cyclonedx import components, cyclonedx, purl
from mirrorgate.commands.spdx import spdx
from mirrorgate.store import Pull
from tests.sboms import valid_cyclonedx, valid_spdx

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TARBALL = b"a tarball's bytes"
INTEGRITY = "sha512-" + base64.b64encode(hashlib.sha512(TARBALL).digest()).decode()
SHA1 = hashlib.sha1(TARBALL, usedforsecurity=False).hexdigest()


def pulled(name: str = "left-pad", version: str = "1.3.0", *, minutes: int = 0,
           **fields: Any) -> Pull:
    made = Pull("web-ci", name, version, INTEGRITY, "public", T0 + timedelta(minutes=minutes),
                f"r{minutes}", "web-ci", sha1=SHA1, license="MIT", verdict="admitted")
    return replace(made, **fields)


def document(*pulls: Pull) -> dict[str, Any]:
    bom = cyclonedx(components(pulls), {"name": "web-ci", "client": "web-ci"}, now=T0)
    return valid_cyclonedx(orjson.dumps(bom).decode())


@pytest.mark.parametrize(("name", "version", "expected"), [
    ("left-pad", "1.3.0", "pkg:npm/left-pad@1.3.0"),
    ("@acme/ui", "2.0.0", "pkg:npm/%40acme/ui@2.0.0"),
    ("@acme/ui", "2.0.0-rc.1+build.5", "pkg:npm/%40acme/ui@2.0.0-rc.1%2Bbuild.5"),
])
def test_a_purl_is_written_as_the_purl_specification_writes_npm_packages(
        name: str, version: str, expected: str) -> None:
    assert purl(name, version) == expected


@pytest.mark.parametrize(("declared", "licenses"), [
    ("MIT", [{"license": {"id": "MIT", "acknowledgement": "declared"}}]),
    ("GPL-2.0+", [{"license": {"id": "GPL-2.0-or-later", "acknowledgement": "declared"}}]),
    ("(MIT OR Apache-2.0)", [{"expression": "MIT OR Apache-2.0",
                              "acknowledgement": "declared"}]),
    ("GPL-2.0-only WITH Classpath-exception-2.0", [
        {"expression": "GPL-2.0-only WITH Classpath-exception-2.0",
         "acknowledgement": "declared"}]),
    ("UNLICENSED", [{"license": {"name": "UNLICENSED", "acknowledgement": "declared"}}]),
    ("SEE LICENSE IN LICENSE.md", [{"license": {"name": "SEE LICENSE IN LICENSE.md",
                                                "acknowledgement": "declared"}}]),
    ("Apache 2.0", [{"license": {"name": "Apache 2.0", "acknowledgement": "declared"}}]),
])
def test_a_declared_license_is_an_id_an_expression_or_a_name(
        declared: str, licenses: list[dict[str, Any]]) -> None:
    [component] = document(pulled(license=declared))["components"]
    assert component["licenses"] == licenses


def test_a_version_declaring_no_license_has_no_licenses() -> None:
    [component] = document(pulled(license=None))["components"]
    assert "licenses" not in component


def test_pulls_of_one_version_are_one_component_and_refusals_none() -> None:
    bom = document(pulled(minutes=1), pulled(minutes=5, source="mirror"),
                   pulled("evil-pkg", "1.0.0", minutes=2, source="refused:license"))

    [component] = bom["components"]
    said = {p["name"]: p["value"] for p in component["properties"]}
    assert said == {"mirrorgate:served-from": "mirror,public",
                    "mirrorgate:verdict": "admitted", "mirrorgate:integrity": INTEGRITY,
                    "mirrorgate:pulls": "2", "mirrorgate:first-pulled": "2026-12-01T12:01:00Z",
                    "mirrorgate:last-pulled": "2026-12-01T12:05:00Z"}
    assert component["hashes"] == [{"alg": "SHA-512",
                                    "content": hashlib.sha512(TARBALL).hexdigest()},
                                   {"alg": "SHA-1", "content": SHA1}]


def test_one_version_served_as_two_tarballs_is_two_components_with_their_own_refs() -> None:
    # a republish under the same version: the build got one of two sets of bytes, and the
    # document must say which
    other = "sha512-" + base64.b64encode(hashlib.sha512(b"other").digest()).decode()
    bom = document(pulled(), pulled(minutes=3, integrity=other, sha1=None))

    refs = [c["bom-ref"] for c in bom["components"]]
    assert len(set(refs)) == 2
    assert bom["dependencies"] == [{"ref": "build", "dependsOn": refs}]


def test_the_verdict_it_was_served_under_is_kept_as_said() -> None:
    [component] = document(pulled(verdict="admitted; weak; would deny: license-unknown"))[
        "components"]
    said = {p["name"]: p["value"] for p in component["properties"]}
    assert said["mirrorgate:verdict"] == "admitted; weak; would deny: license-unknown"


def test_an_empty_selection_is_a_valid_document() -> None:
    assert document()["components"] == []


# --- SPDX 2.3 ------------------------------------------------------------------------------

def spdx_document(tmp_path: Path, *pulls: Pull) -> dict[str, Any]:
    """`--format spdx`'s document, parsed and validated by spdx-tools."""
    written = spdx(components(pulls), {"name": "web-ci", "client": "web-ci"}, now=T0)
    path = tmp_path / "bom.spdx.json"
    path.write_bytes(orjson.dumps(written))
    return valid_spdx(path)


def test_the_spdx_document_lists_the_same_components_and_validates(tmp_path: Path) -> None:
    written = spdx_document(tmp_path, pulled(),
                            pulled("@acme/ui", "2.0.0+b.1", license="MIT OR ISC"),
                            pulled("gone", "1.0.0", source="refused:license"))

    packages = {p["name"]: p for p in written["packages"]}
    assert set(packages) == {"web-ci", "left-pad", "@acme/ui"}
    ui = packages["@acme/ui"]
    assert ui["licenseDeclared"] == "MIT OR ISC"
    assert ui["checksums"] == [{"algorithm": "SHA512",
                                "checksumValue": hashlib.sha512(TARBALL).hexdigest()},
                               {"algorithm": "SHA1", "checksumValue": SHA1}]
    assert ui["externalRefs"] == [{"referenceCategory": "PACKAGE-MANAGER",
                                   "referenceType": "purl",
                                   "referenceLocator": "pkg:npm/%40acme/ui@2.0.0%2Bb.1"}]
    assert "served from public; verdict: admitted" in ui["comment"]
    assert {r["relationshipType"] for r in written["relationships"]} == {"DESCRIBES",
                                                                        "DEPENDS_ON"}


def test_a_license_spdx_cannot_state_is_extracted_text_or_noassertion(tmp_path: Path) -> None:
    written = spdx_document(tmp_path, pulled(license="SEE LICENSE IN LICENSE.md"),
                            pulled("other", "1.0.0", license=None))

    packages = {p["name"]: p for p in written["packages"]}
    assert packages["left-pad"]["licenseDeclared"] == "LicenseRef-declared-1"
    assert written["hasExtractedLicensingInfos"] == [{
        "licenseId": "LicenseRef-declared-1", "extractedText": "SEE LICENSE IN LICENSE.md",
        "name": "SEE LICENSE IN LICENSE.md"}]
    assert packages["other"]["licenseDeclared"] == "NOASSERTION"
