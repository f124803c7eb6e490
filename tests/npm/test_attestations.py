"""Reading the workflow a version's provenance statement names (`npm.attestations`), from an
attestations document shaped as npm's registry serves it: two Sigstore bundles, the SLSA
statement base64 in a DSSE envelope (`tests.servers.attestations`). The workflow is evidence
in a verdict (docs/verdicts.md#provenance-is-evidence-not-a-pass): what cannot be read says
why, and never reads as a workflow."""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest

from mirrorgate.npm.attestations import (
    AttestationsError,
    Workflow,
    attestations_path,
    workflow_of,
)
from mirrorgate.npm.names import parse_name
from tests.servers.attestations import PUBLISH, attestations_document
from tests.servers.packages import make_version

ROUTER = parse_name("@tanstack/react-router")
VERSION = make_version("@tanstack/react-router", "1.120.5", files={"index.js": b"x" * 4000})


def document(**overrides: Any) -> dict[str, Any]:
    made = {"repository": "https://github.com/TanStack/router",
            "path": ".github/workflows/release.yml", "ref": "refs/heads/main", **overrides}
    return attestations_document(VERSION, **made)


def statement_of(made: dict[str, Any]) -> dict[str, Any]:
    payload = made["attestations"][1]["bundle"]["dsseEnvelope"]["payload"]
    found: dict[str, Any] = orjson.loads(base64.b64decode(payload))
    return found


def with_statement(made: dict[str, Any], statement: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(made)
    changed["attestations"][1]["bundle"]["dsseEnvelope"]["payload"] = base64.b64encode(
        orjson.dumps(statement)).decode()
    return changed


def test_the_document_is_shaped_as_npm_serves_it() -> None:
    # the realism of the fixture: a publish attestation, then the provenance, each a bundle
    made = document()
    kinds = [attestation["predicateType"] for attestation in made["attestations"]]
    assert kinds == [PUBLISH, "https://slsa.dev/provenance/v1"]
    envelope = made["attestations"][1]["bundle"]["dsseEnvelope"]
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert statement_of(made)["subject"][0]["name"] == \
        "pkg:npm/%40tanstack/react-router@1.120.5"
    assert 5_000 < len(orjson.dumps(made)) < 20_000  # npm's are some 10 KB


def test_a_slsa_v1_statement_names_its_workflow_repository_path_and_ref() -> None:
    found = workflow_of(document(), ROUTER, "1.120.5")

    assert found == Workflow("github.com/tanstack/router", ".github/workflows/release.yml",
                             "refs/heads/main")


def test_a_v0_2_statement_of_the_first_provenance_releases_reads_the_same() -> None:
    # `entryPoint` spelled `owner/repo/.github/workflows/publish.yml@refs/tags/v1.0.0`
    found = workflow_of(document(slsa="v0.2", ref="refs/tags/v1.120.5"), ROUTER, "1.120.5")

    assert found == Workflow("github.com/tanstack/router", ".github/workflows/release.yml",
                             "refs/tags/v1.120.5")


def test_two_releases_by_one_workflow_at_different_tags_are_the_same_workflow() -> None:
    one = workflow_of(document(ref="refs/tags/v1.120.4"), ROUTER, "1.120.5")
    two = workflow_of(document(ref="refs/tags/v1.120.5"), ROUTER, "1.120.5")
    other = workflow_of(document(path=".github/workflows/pr.yml"), ROUTER, "1.120.5")

    assert one.same(two)
    assert not one.same(other)


def test_the_path_is_built_from_the_name_and_version_never_from_the_documents_url() -> None:
    assert attestations_path(ROUTER, "1.120.5") == \
        "-/npm/v1/attestations/@tanstack%2freact-router@1.120.5"
    assert attestations_path(parse_name("chalk"), "5.6.0") == \
        "-/npm/v1/attestations/chalk@5.6.0"


def test_a_statement_about_another_version_is_not_read_as_this_ones() -> None:
    with pytest.raises(AttestationsError, match=r"not about @tanstack/react-router@1\.120\.6"):
        workflow_of(document(), ROUTER, "1.120.6")


def _without_provenance() -> dict[str, Any]:
    made = document()
    made["attestations"] = made["attestations"][:1]  # the publish attestation alone
    return made


def _not_base64() -> dict[str, Any]:
    made = document()
    made["attestations"][1]["bundle"]["dsseEnvelope"]["payload"] = "not base64 at all!"
    return made


def _no_workflow() -> dict[str, Any]:
    made = document()
    statement = statement_of(made)
    del statement["predicate"]["buildDefinition"]["externalParameters"]["workflow"]
    return with_statement(made, statement)


def _unprintable_path() -> dict[str, Any]:
    made = document()
    statement = statement_of(made)
    statement["predicate"]["buildDefinition"]["externalParameters"]["workflow"]["path"] = \
        "release.yml\n\x1b[2Jforged line"
    return with_statement(made, statement)


@pytest.mark.parametrize(("broken", "why"), [
    (lambda: {"error": "not found"}, "no `attestations` list"),
    (_without_provenance, "no SLSA provenance attestation"),
    (_not_base64, "not base64 JSON"),
    (_no_workflow, "names no workflow"),
    (_unprintable_path, "no readable workflow path"),
])
def test_a_malformed_document_says_why_it_names_no_workflow(broken: Any, why: str) -> None:
    with pytest.raises(AttestationsError, match=why):
        workflow_of(broken(), ROUTER, "1.120.5")
