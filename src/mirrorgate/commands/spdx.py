"""The same bill of materials as an SPDX 2.3 JSON document (`mirrorgate sbom --format spdx`):
one package per component of `commands.cyclonedx`, described by the build's own package.

Written as plain JSON, as the CycloneDX one is and for the same reason; the tests validate it
with spdx-tools, the SPDX project's own library. A declared license SPDX cannot state (none is
written as NOASSERTION; `UNLICENSED`, `SEE LICENSE IN ...` or free text as a `LicenseRef-`
whose extracted text is the declaration), unlike `npm sbom`, which writes it as is.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from mirrorgate import __version__
from mirrorgate.commands.cyclonedx import Component, hashes, purl
from mirrorgate.moments import stamp
from mirrorgate.rules.license import spdx_expression

__all__ = ["spdx"]

NOASSERTION = "NOASSERTION"
_ID_CHARACTERS = re.compile(r"[^A-Za-z0-9.-]+")
_ALGORITHMS = {"SHA-512": "SHA512", "SHA-384": "SHA384", "SHA-256": "SHA256", "SHA-1": "SHA1"}


def _id(text: str) -> str:
    """An SPDX identifier's idstring: letters, digits, `.` and `-`."""
    return _ID_CHARACTERS.sub("-", text).strip("-") or "x"


def spdx(found: list[Component], build: Mapping[str, str | None], *, now: datetime,
         namespace: uuid.UUID | None = None) -> dict[str, Any]:
    """The SPDX 2.3 document of `found`; `build` as for `cyclonedx`."""
    name = build.get("name") or "mirrorgate pulls"
    extracted: dict[str, str] = {}  # declaration -> its LicenseRef
    packages: list[dict[str, Any]] = [{
        "SPDXID": "SPDXRef-build", "name": name, "downloadLocation": NOASSERTION,
        "filesAnalyzed": False, "primaryPackagePurpose": "APPLICATION",
        "comment": "; ".join(f"{key}: {value}" for key, value in build.items()
                             if key != "name" and value is not None) or None}]
    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relatedSpdxElement": "SPDXRef-build",
                      "relationshipType": "DESCRIBES"}]
    seen: dict[str, int] = {}
    for component in found:
        identity = f"SPDXRef-npm-{_id(component.name)}-{_id(component.version)}"
        seen[identity] = seen.get(identity, 0) + 1
        if seen[identity] > 1:  # one version served as two tarballs: two packages
            identity += f"-{seen[identity]}"
        packages.append({
            "SPDXID": identity, "name": component.name, "versionInfo": component.version,
            "downloadLocation": NOASSERTION, "filesAnalyzed": False,
            "checksums": [{"algorithm": _ALGORITHMS[h["alg"]], "checksumValue": h["content"]}
                          for h in hashes(component)],
            "licenseConcluded": NOASSERTION,
            "licenseDeclared": _declared(component.license, extracted),
            "copyrightText": NOASSERTION,
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": purl(component.name, component.version)}],
            "comment": (f"served from {', '.join(sorted(component.served_from))}; verdict: "
                        f"{'; '.join(component.verdicts) or 'unknown'}; pulls: "
                        f"{component.pulls}")})
        relationships.append({"spdxElementId": "SPDXRef-build", "relatedSpdxElement": identity,
                              "relationshipType": "DEPENDS_ON"})
    for package in packages:
        if package.get("comment") is None:
            package.pop("comment", None)
    document: dict[str, Any] = {
        "spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        "documentNamespace": f"https://mirrorgate.invalid/sbom/{namespace or uuid.uuid4()}",
        "creationInfo": {"created": stamp(now), "creators": [f"Tool: mirrorgate-{__version__}"]},
        "packages": packages, "relationships": relationships}
    if extracted:
        document["hasExtractedLicensingInfos"] = [
            {"licenseId": ref, "extractedText": text, "name": text[:100]}
            for text, ref in extracted.items()]
    return document


def _declared(declared: str | None, extracted: dict[str, str]) -> str:
    if declared is None:
        return NOASSERTION
    expression = spdx_expression(declared)
    if expression is not None:
        return expression
    if declared not in extracted:
        extracted[declared] = f"LicenseRef-declared-{len(extracted) + 1}"
    return extracted[declared]
