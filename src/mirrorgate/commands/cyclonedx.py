"""A CycloneDX 1.6 bill of materials, as JSON, of the versions a client was served: one
component per name, version and bytes, with its purl, hashes, declared license, where it was
served from and the verdict it was served under; the build's identity in the metadata.

Written as plain JSON rather than through cyclonedx-python-lib: the document is a dozen fields
a component, and the library would bring its object model, serialiser and their dependencies
into the proxy's image for them. The tests hold every document to the CycloneDX 1.6 schema
with that library's validator (tests/commands/test_sbom.py).
"""

from __future__ import annotations

import binascii
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from packageurl import PackageURL

from mirrorgate import __version__
from mirrorgate.integrity import parse_integrity
from mirrorgate.moments import stamp
from mirrorgate.rules.license import spdx_expression
from mirrorgate.store import Pull

__all__ = ["SCHEMA", "SPEC_VERSION", "Component", "components", "cyclonedx", "hashes", "purl"]

SPEC_VERSION = "1.6"
SCHEMA = "http://cyclonedx.org/schema/bom-1.6.schema.json"
_ALGORITHMS = {"sha1": "SHA-1", "sha256": "SHA-256", "sha384": "SHA-384", "sha512": "SHA-512"}
PROPERTY = "mirrorgate"
"""The namespace of mirrorgate's own properties (CycloneDX's property taxonomy)."""


def purl(name: str, version: str) -> str:
    """`pkg:npm/%40scope/name@version`, as the purl specification writes an npm package."""
    scope, _, bare = name.rpartition("/")
    return PackageURL(type="npm", namespace=scope or None, name=bare, version=version).to_string()


@dataclass
class Component:
    """One version's bytes as a client was served them, gathered over its pulls."""

    name: str
    version: str
    integrity: str
    sha1: str | None
    license: str | None
    served_from: set[str] = field(default_factory=set)
    verdicts: list[str] = field(default_factory=list)
    clients: set[str] = field(default_factory=set)
    first: datetime | None = None
    last: datetime | None = None
    pulls: int = 0

    def add(self, pull: Pull) -> None:
        self.served_from.add(pull.source)
        if pull.verdict and pull.verdict not in self.verdicts:
            self.verdicts.append(pull.verdict)
        self.clients.add(pull.client)
        self.first = pull.at if self.first is None else min(self.first, pull.at)
        self.last = pull.at if self.last is None else max(self.last, pull.at)
        self.pulls += 1
        self.sha1 = self.sha1 or pull.sha1
        self.license = self.license or pull.license


def components(pulls: Iterable[Pull]) -> list[Component]:
    """The served pulls (from the mirror or public) gathered by name, version and integrity,
    in name and version order. A refusal installed nothing and is no component: the store
    counts refusals apart (`Store.refused`), and a record saying one is skipped all the same."""
    found: dict[tuple[str, str, str], Component] = {}
    for pull in pulls:
        if pull.source.startswith("refused:"):
            continue
        key = (pull.name, pull.version, pull.integrity)
        if key not in found:
            found[key] = Component(pull.name, pull.version, pull.integrity, pull.sha1,
                                   pull.license)
        found[key].add(pull)
    return [found[key] for key in sorted(found)]


def hashes(component: Component) -> list[dict[str, str]]:
    """The component's digests as CycloneDX names them, strongest first, in hex."""
    found: dict[str, str] = {}
    for digest in parse_integrity(component.integrity):
        try:
            found[_ALGORITHMS[digest.algorithm]] = digest.raw().hex()
        except (KeyError, ValueError, binascii.Error):
            continue  # an algorithm CycloneDX has no name for, or no base64: left out
    if component.sha1 is not None and len(component.sha1) == 40:
        found.setdefault("SHA-1", component.sha1.lower())
    order = ("SHA-512", "SHA-384", "SHA-256", "SHA-1")
    return [{"alg": alg, "content": found[alg]} for alg in order if alg in found]


def _licenses(declared: str | None) -> list[dict[str, Any]]:
    """The declared license: an SPDX identifier as an id, an expression as an expression,
    anything else (UNLICENSED, SEE LICENSE IN, free text) by its name, as npm sbom does."""
    if declared is None:
        return []
    expression = spdx_expression(declared)
    if expression is None:
        return [{"license": {"name": declared, "acknowledgement": "declared"}}]
    if " " not in expression:
        return [{"license": {"id": expression, "acknowledgement": "declared"}}]
    return [{"expression": expression, "acknowledgement": "declared"}]


def _properties(pairs: Iterable[tuple[str, str | None]]) -> list[dict[str, str]]:
    return [{"name": f"{PROPERTY}:{name}", "value": value} for name, value in pairs
            if value is not None]


def _component(component: Component, ref: str) -> dict[str, Any]:
    document: dict[str, Any] = {
        "type": "library", "bom-ref": ref, "name": component.name,
        "version": component.version, "purl": purl(component.name, component.version)}
    found = hashes(component)
    if found:
        document["hashes"] = found
    licenses = _licenses(component.license)
    if licenses:
        document["licenses"] = licenses
    document["properties"] = _properties([
        ("served-from", ",".join(sorted(component.served_from))),
        ("verdict", "; ".join(component.verdicts) or None),
        ("integrity", component.integrity or None),
        ("pulls", str(component.pulls)),
        ("first-pulled", stamp(component.first) if component.first else None),
        ("last-pulled", stamp(component.last) if component.last else None)])
    return document


def cyclonedx(found: list[Component], build: Mapping[str, str | None], *, now: datetime,
              serial: uuid.UUID | None = None) -> dict[str, Any]:
    """The bill of materials of `found`; `build` names the build it is of (`name`, and the
    client, CI identity and time window it was selected by), its metadata's component."""
    refs: dict[str, int] = {}
    listed = []
    for component in found:
        ref = purl(component.name, component.version)
        refs[ref] = refs.get(ref, 0) + 1
        # one version pulled as two different tarballs (a republish): two components
        listed.append(_component(component, ref if refs[ref] == 1 else f"{ref}#{refs[ref]}"))
    subject: dict[str, Any] = {"type": "application", "bom-ref": "build",
                               "name": build.get("name") or "mirrorgate pulls"}
    properties = _properties((key, value) for key, value in build.items() if key != "name")
    if properties:
        subject["properties"] = properties
    return {
        "$schema": SCHEMA,
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": (serial or uuid.uuid4()).urn,
        "version": 1,
        "metadata": {
            "timestamp": stamp(now),
            "lifecycles": [{"phase": "build"}],
            "tools": {"components": [{"type": "application", "name": "mirrorgate",
                                      "version": __version__}]},
            "component": subject,
        },
        "components": listed,
        "dependencies": [{"ref": "build", "dependsOn": [c["bom-ref"] for c in listed]}],
    }
