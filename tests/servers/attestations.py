"""npm attestations documents as the registry serves them at `/-/npm/v1/attestations/
<name>@<version>`: two Sigstore bundles (npm's publish attestation and the SLSA provenance a
CI run made), each a DSSE envelope whose payload is the base64 in-toto statement.

Shaped as npm's own test fixtures and libnpmpublish's `provenance.js` make them (the statement
of SLSA v1 and of v0.2, the bundle's `verificationMaterial`); the certificate, signatures and
log entries are deterministic filler of real sizes: mirrorgate reads the statement as the
registry's word and never verifies a signature (docs/verdicts.md).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any, Literal

import orjson

from tests.servers.packages import FixtureVersion

__all__ = ["PUBLISH", "SLSA_V1", "attestations_document", "attested"]

SLSA_V1 = "https://slsa.dev/provenance/v1"
SLSA_V02 = "https://slsa.dev/provenance/v0.2"
PUBLISH = "https://github.com/npm/attestation/tree/main/specs/publish/v0.1"
_IN_TOTO = "application/vnd.in-toto+json"


def _filler(seed: str, size: int) -> str:
    """`size` deterministic bytes, base64: a certificate's or a signature's length."""
    out = b""
    while len(out) < size:
        out += hashlib.sha512(f"{seed}:{len(out)}".encode()).digest()
    return base64.b64encode(out[:size]).decode()


def _purl(name: str) -> str:
    return f"pkg:npm/%40{name[1:]}" if name.startswith("@") else f"pkg:npm/{name}"


def _bundle(statement: dict[str, Any], seed: str, keyid: str) -> dict[str, Any]:
    material: dict[str, Any] = (
        {"publicKey": {"hint": keyid}} if keyid else
        {"certificate": {"rawBytes": _filler(seed + "cert", 924)}})
    material["tlogEntries"] = [{
        "logIndex": "148305521", "logId": {"keyId": _filler(seed + "log", 32)},
        "kindVersion": {"kind": "dsse", "version": "0.0.1"}, "integratedTime": "1733390000",
        "inclusionPromise": {"signedEntryTimestamp": _filler(seed + "set", 71)},
        "inclusionProof": {"logIndex": "26401259", "rootHash": _filler(seed + "root", 32),
                           "treeSize": "26401260",
                           "hashes": [_filler(seed + f"h{i}", 32) for i in range(12)],
                           "checkpoint": {"envelope": "rekor.sigstore.dev - 1193050959916656506"
                                          "\n26401260\n" + _filler(seed + "cp", 32) + "\n"}},
        "canonicalizedBody": _filler(seed + "body", 1200)}]
    return {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": material,
        "dsseEnvelope": {
            "payload": base64.b64encode(orjson.dumps(statement)).decode(),
            "payloadType": _IN_TOTO,
            "signatures": [{"sig": _filler(seed + "sig", 71), "keyid": keyid}]}}


def attestations_document(version: FixtureVersion, *, repository: str, path: str,
                          ref: str, slsa: Literal["v1", "v0.2"] = "v1") -> dict[str, Any]:
    """What the registry serves for `version` built by `path` of `repository`
    (`https://github.com/owner/repo`) at `ref`: its publish attestation and its provenance,
    the statement's subject the tarball's sha512."""
    subject = [{"name": f"{_purl(version.name)}@{version.version}",
                "digest": {"sha512": hashlib.sha512(version.tarball).hexdigest()}}]
    owner_repo = repository.split("://", 1)[-1].split("/", 1)[1]
    # a git commit's 40 hex digits, as filler
    sha = hashlib.sha256(f"{version.name}{version.version}".encode()).hexdigest()[:40]
    if slsa == "v1":
        provenance: dict[str, Any] = {
            "_type": "https://in-toto.io/Statement/v1", "subject": subject,
            "predicateType": SLSA_V1,
            "predicate": {
                "buildDefinition": {
                    "buildType": "https://slsa-framework.github.io/github-actions-buildtypes/"
                                 "workflow/v1",
                    "externalParameters": {"workflow": {"ref": ref, "repository": repository,
                                                        "path": path}},
                    "internalParameters": {"github": {"event_name": "release",
                                                      "repository_id": "495574555",
                                                      "repository_owner_id": "71096353"}},
                    "resolvedDependencies": [{"uri": f"git+{repository}@{ref}",
                                              "digest": {"gitCommit": sha}}]},
                "runDetails": {
                    "builder": {"id": "https://github.com/actions/runner/github-hosted"},
                    "metadata": {"invocationId": f"{repository}/actions/runs/12204081311/"
                                                 "attempts/1"}}}}
    else:
        # the first versions published with provenance: `entryPoint` spelled after the
        # repository, with the ref
        provenance = {
            "_type": "https://in-toto.io/Statement/v0.1", "subject": subject,
            "predicateType": SLSA_V02,
            "predicate": {
                "buildType": "https://github.com/npm/cli/gha@v0",
                "builder": {"id": "https://github.com/npm/cli@9.4.2"},
                "invocation": {
                    "configSource": {"uri": f"git+{repository}@{ref}", "digest": {"sha1": sha},
                                     "entryPoint": f"{owner_repo}/{path}@{ref}"},
                    "parameters": {},
                    "environment": {"GITHUB_EVENT_NAME": "release", "GITHUB_REF": ref,
                                    "GITHUB_REPOSITORY": owner_repo,
                                    "GITHUB_WORKFLOW_REF": f"{owner_repo}/{path}@{ref}"}},
                "materials": [{"uri": f"git+{repository}", "digest": {"sha1": sha}}]}}
    publish = {"_type": "https://in-toto.io/Statement/v0.1", "subject": subject,
               "predicateType": PUBLISH,
               "predicate": {"name": version.name, "version": version.version,
                             "registry": "https://registry.example.test"}}
    seed = f"{version.name}@{version.version}"
    return {"attestations": [
        {"predicateType": PUBLISH, "bundle": _bundle(
            publish, seed + "publish", "SHA256:jl3bwswu80PjjokCgh0o2w5c2U4LhQAE57gj9cz1kzA")},
        {"predicateType": provenance["predicateType"],
         "bundle": _bundle(provenance, seed + "provenance", "")}]}


def attested(version: FixtureVersion, predicate: str = SLSA_V1) -> FixtureVersion:
    """`version` as a CI run of its repository publishes it: the registry's provenance in its
    `dist`. The URL's host is another registry's (port 9, discard): mirrorgate asks the
    public upstream it is configured with, as pacote asks the registry it is configured with."""
    return version.with_dist(attestations={
        "url": f"http://127.0.0.1:9/-/npm/v1/attestations/{version.name}@{version.version}",
        "provenance": {"predicateType": predicate}})
