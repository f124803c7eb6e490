"""What the registry says of where a version was built: whether the packument says it carries
SLSA provenance (`dist.attestations`), its source repository as one comparable text, and the
workflow the provenance statement of its attestations document names.

One reading for the rules that use it: the takeover signal (`rules.takeover`), kinship
between a release and its dependencies (`rules.kinship`) and the provenance sentence of a
release verdict (`rules.provenance`). docs/verdicts.md#provenance-is-evidence-not-a-pass.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from mirrorgate.errors import MirrorgateError
from mirrorgate.npm.names import PackageName

__all__ = ["MAX_ATTESTATIONS_BYTES", "PROVENANCE_PREDICATE", "AttestationsError", "Workflow",
           "attestations_path", "has_provenance", "normalised_repository", "workflow_of"]

PROVENANCE_PREDICATE = "https://slsa.dev/provenance/"
"""npm's `dist.attestations.provenance.predicateType` starts with this: `.../v1` today,
`.../v0.2` on the first versions published with provenance; both count. An identifier the
SLSA spec defines, compared as text, never fetched."""
MAX_ATTESTATIONS_BYTES = 1024 * 1024
"""An attestations document held at most: npm's are some 10 KB (two Sigstore bundles)."""
_PRINTABLE = re.compile(r"[ -~]{1,200}")
_IN_TOTO = "application/vnd.in-toto+json"


def has_provenance(manifest: Mapping[str, Any]) -> bool:
    """Whether the packument says this version carries SLSA provenance."""
    dist = manifest.get("dist")
    attestations = dist.get("attestations") if isinstance(dist, Mapping) else None
    provenance = attestations.get("provenance") if isinstance(attestations, Mapping) else None
    kind = provenance.get("predicateType") if isinstance(provenance, Mapping) else None
    return isinstance(kind, str) and kind.startswith(PROVENANCE_PREDICATE)


def normalised_repository(url: str) -> str | None:
    """`git+https://github.com/Owner/Repo.git` and `github:owner/repo` alike, as one text
    (`github.com/owner/repo`); None for what names no `host/owner/repo`."""
    text = url.strip().lower()
    for prefix in ("git+", "git://", "ssh://git@", "https://", "http://", "git@"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if text.startswith("github:"):
        text = "github.com/" + text[len("github:"):]
    text = text.replace("github.com:", "github.com/", 1).split("#", 1)[0].rstrip("/")
    text = text.removesuffix(".git")
    host, _, path = text.partition("/")
    # printable and bounded: it is quoted in a verdict's evidence
    if not host or path.count("/") < 1 or not _PRINTABLE.fullmatch(text):
        return None  # not `host/owner/repo`: nothing two packages can be matched on
    return text


def attestations_path(name: PackageName, version: str) -> str:
    """Where npm's registry protocol serves a version's attestations document, under the
    registry's base URL (`/-/npm/v1/attestations/@scope%2fname@1.0.0`). Built from the name
    and version, as pacote joins the path to the registry it is configured with: the host in
    `dist.attestations.url` is the publisher's registry's word, never fetched."""
    return f"-/npm/v1/attestations/{name.url_path()}@{quote(version, safe='+')}"


class AttestationsError(MirrorgateError, ValueError):
    """Why an attestations document says no workflow mirrorgate can read; the text says what
    is wrong with it."""


@dataclass(frozen=True, slots=True)
class Workflow:
    """The CI workflow a version's SLSA provenance statement says built it."""

    repository: str
    """The source repository, as `normalised_repository` spells it."""
    path: str
    """The workflow's file in it (`.github/workflows/release.yml`), or GitLab's job name."""
    ref: str
    """The git ref it ran at (`refs/tags/v1.0.1`): each release's own, so said, not compared."""

    def same(self, other: Workflow) -> bool:
        """Built by the same workflow of the same repository, whatever ref each ran at."""
        return (self.repository, self.path) == (other.repository, other.path)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not _PRINTABLE.fullmatch(value):
        raise AttestationsError(f"its provenance statement has no readable {what}")
    return value


def _statement(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """The in-toto statement of the document's SLSA provenance attestation: the DSSE
    envelope's payload, base64 JSON. Its signature is not verified: the registry verified it
    at publish, and its statement is read as the registry's word, as the repository is."""
    attestations = document.get("attestations")
    if not isinstance(attestations, list):
        raise AttestationsError("it holds no `attestations` list")
    for attestation in attestations:
        kind = attestation.get("predicateType") if isinstance(attestation, Mapping) else None
        if not isinstance(kind, str) or not kind.startswith(PROVENANCE_PREDICATE):
            continue  # npm's publish attestation: who published, not where it was built
        bundle = attestation.get("bundle")
        envelope = bundle.get("dsseEnvelope") if isinstance(bundle, Mapping) else None
        if not isinstance(envelope, Mapping) or not isinstance(envelope.get("payload"), str):
            raise AttestationsError("its provenance attestation carries no DSSE payload")
        payload = envelope["payload"]
        if envelope.get("payloadType", _IN_TOTO) != _IN_TOTO:
            raise AttestationsError("its provenance payload is not an in-toto statement")
        try:
            statement = orjson.loads(base64.b64decode(payload, validate=True))
        except (binascii.Error, ValueError, orjson.JSONDecodeError):
            raise AttestationsError("its provenance payload is not base64 JSON") from None
        if not isinstance(statement, Mapping):
            raise AttestationsError("its provenance payload is not a JSON object")
        return statement
    raise AttestationsError("it holds no SLSA provenance attestation")


def _purl(name: PackageName, version: str) -> str:
    """The package URL a statement's subject names (`pkg:npm/%40scope/name@1.0.0`)."""
    scope = f"%40{name.scope}/" if name.scope else ""
    return f"pkg:npm/{scope}{name.bare}@{version}"


def workflow_of(document: Mapping[str, Any], name: PackageName, version: str) -> Workflow:
    """The workflow `name@version`'s provenance statement names: SLSA v1's
    `predicate.buildDefinition.externalParameters.workflow` (`{repository, path, ref}`), or
    v0.2's `predicate.invocation.configSource` (`{uri: git+REPO@REF, entryPoint}`) on the
    first versions published with provenance. Raises AttestationsError."""
    statement = _statement(document)
    subjects = statement.get("subject")
    named = [subject.get("name") for subject in subjects if isinstance(subject, Mapping)] \
        if isinstance(subjects, list) else []
    if _purl(name, version) not in named:
        # the registry's answer for this path, about another package or version
        raise AttestationsError(f"its provenance statement is not about {name.full}@{version}")
    predicate = statement.get("predicate")
    predicate = predicate if isinstance(predicate, Mapping) else {}
    definition = predicate.get("buildDefinition")
    if isinstance(definition, Mapping):
        external = definition.get("externalParameters")
        workflow = external.get("workflow") if isinstance(external, Mapping) else None
        if not isinstance(workflow, Mapping):
            raise AttestationsError("its provenance statement names no workflow")
        repository = _text(workflow.get("repository"), "workflow repository")
        path, ref = _text(workflow.get("path"), "workflow path"), \
            _text(workflow.get("ref"), "workflow ref")
    else:
        invocation = predicate.get("invocation")
        source = invocation.get("configSource") if isinstance(invocation, Mapping) else None
        if not isinstance(source, Mapping):
            raise AttestationsError("its provenance statement names no workflow")
        repository, _, ref = _text(source.get("uri"), "workflow source").partition("@")
        path = _text(source.get("entryPoint"), "workflow entry point").split("@", 1)[0]
    normalised = normalised_repository(repository)
    if normalised is None:
        raise AttestationsError("its provenance statement names no `host/owner/repo`")
    # the first v0.2 statements spelled the path after the repository (`owner/repo/.github/
    # workflows/publish.yml@refs/tags/v1.0.0`): compared without it
    owner_repo = normalised.split("/", 1)[1] + "/"
    if path.lower().startswith(owner_repo):
        path = path[len(owner_repo):]
    return Workflow(normalised, path, ref)
