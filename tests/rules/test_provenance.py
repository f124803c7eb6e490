"""Provenance as evidence, not as a pass (`rules.provenance`): where a release was built,
against its baseline (the repository, and the workflow the attestations documents name), is
said in the verdict and never weighed. A stolen token publishes without the project's
provenance; a poisoned pipeline (TanStack, May 2026) publishes with it, from the project's own
repository and release workflow: so the same repository and workflow never admit a gain.
docs/verdicts.md#provenance-is-evidence-not-a-pass."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from mirrorgate.npm.attestations import Workflow
from mirrorgate.npm.contents import contents_of
from mirrorgate.rules import parse_rules
from mirrorgate.rules.capabilities import check_gained
from mirrorgate.rules.kinship import provenance_repository
from mirrorgate.rules.provenance import provenance_evidence
from mirrorgate.rules.release import Release, judge
from mirrorgate.rules.releasetable import NEW_CAPABILITY
from tests.npm.test_capabilities import real, with_manifest
from tests.servers.packages import build_tarball
from tests.servers.payloads import worm_dropper

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
REPOSITORY = "git+https://github.com/TanStack/router.git"


def manifest(repository: str | None, *, attested: bool) -> dict[str, Any]:
    """A registry manifest: its declared repository, with provenance or without."""
    made: dict[str, Any] = {"dist": {}}
    if repository is not None:
        made["repository"] = {"type": "git", "url": repository}
    if attested:
        made["dist"]["attestations"] = {
            "url": "http://127.0.0.1:9/-/npm/v1/attestations/pkg@1.0.0",
            "provenance": {"predicateType": "https://slsa.dev/provenance/v1"}}
    return made


def release(version: str, repository: str | None = REPOSITORY, *, attested: bool = True,
            files: dict[str, bytes] | None = None) -> Release:
    """A release as the gate builds it (`gate.verdicts.findings.release_of`): the repository its
    provenance names, read from the manifest by `rules.kinship`."""
    contents = contents_of(build_tarball(files or real("chalk-5.6.0")))
    return Release(version, contents,
                   provenance=provenance_repository(manifest(repository, attested=attested)))


# --- the sentence -----------------------------------------------------------------------------


def test_the_same_repository_with_provenance_says_so_and_says_it_is_not_a_pass() -> None:
    said = provenance_evidence(release("1.5.1"), release("1.5.0"))

    assert said == ("1.5.1 was built from the same repository as 1.5.0 "
                    "(github.com/tanstack/router), both with provenance: that says where it "
                    "was built, not what its code does")


def test_another_repository_is_named_beside_the_baselines() -> None:
    said = provenance_evidence(release("1.5.1", "https://github.com/someone/fork"),
                               release("1.5.0"))

    assert said is not None
    assert said.startswith("1.5.1 was built from another repository than 1.5.0: ")
    assert "github.com/someone/fork" in said
    assert "github.com/tanstack/router" in said


def test_a_release_without_the_provenance_its_baseline_had_is_the_stolen_token_shape() -> None:
    # a thief with a token publishes from a laptop: no CI run, so no provenance
    said = provenance_evidence(release("1.5.1", attested=False), release("1.5.0"))

    assert said == ("1.5.1 carries no provenance naming its repository, where 1.5.0 was built "
                    "from github.com/tanstack/router with provenance: the shape of a publish "
                    "with a stolen token")


def test_a_repository_declared_without_provenance_is_a_claim_not_provenance() -> None:
    # the same `repository` field, typed by whoever published: nothing the registry checked
    said = provenance_evidence(release("1.5.1", attested=False),
                               release("1.5.0", attested=False))

    assert said is None


def test_provenance_first_carried_by_the_release_is_said() -> None:
    said = provenance_evidence(release("1.5.1"), release("1.5.0", attested=False))

    assert said == ("1.5.1 was built from github.com/tanstack/router with provenance, where "
                    "1.5.0 carried none")


# --- the workflow, read from the attestations documents --------------------------------------

RELEASE_YML = ".github/workflows/release.yml"


def built(made: Release, path: str = RELEASE_YML,
          repository: str = "github.com/tanstack/router") -> Release:
    """`made` as the judge hands it once both attestations documents were read: the workflow
    its provenance statement names, run at the release's own tag."""
    return replace(made, built=Workflow(repository, path, f"refs/tags/v{made.version}"))


def test_the_same_repository_and_workflow_says_both_and_that_it_is_not_a_pass() -> None:
    said = provenance_evidence(built(release("1.5.1")), built(release("1.5.0")))

    # the ref differs (a tag per release): said, never compared
    assert said == ("1.5.1 was built from the same repository as 1.5.0 "
                    "(github.com/tanstack/router) by the same workflow "
                    "(.github/workflows/release.yml, at refs/tags/v1.5.1; 1.5.0 at "
                    "refs/tags/v1.5.0), both with provenance: that says where it was built, "
                    "not what its code does")


def test_another_workflow_of_the_same_repository_is_named_beside_the_baselines() -> None:
    # a workflow a pull request added, or one nobody reviews: the repository alone read the same
    said = provenance_evidence(built(release("1.5.1"), ".github/workflows/pr-preview.yml"),
                               built(release("1.5.0")))

    assert said == ("1.5.1 was built from the same repository as 1.5.0 "
                    "(github.com/tanstack/router), by another workflow: "
                    ".github/workflows/pr-preview.yml of github.com/tanstack/router, where "
                    "1.5.0 was built by .github/workflows/release.yml of "
                    "github.com/tanstack/router, both with provenance: that says where it "
                    "was built, not what its code does")


def test_a_workflow_not_read_says_so_and_why_and_is_never_the_same_workflow() -> None:
    why = ("its attestations document could not be fetched: public upstream: cannot "
           "connect (ClientConnectorError)")
    said = provenance_evidence(replace(release("1.5.1"), built=why), built(release("1.5.0")))

    assert said == ("1.5.1 was built from the same repository as 1.5.0 "
                    f"(github.com/tanstack/router), its workflow not read (1.5.1's: {why}), "
                    "both with provenance: that says where it was built, not what its code "
                    "does")


# --- never a pass -------------------------------------------------------------------------------


def poisoned(attested: bool = True) -> Release:
    """TanStack's shape: the project's own pipeline builds and signs a release whose new
    `preinstall` fetches a runtime and spawns it."""
    files = with_manifest({**real("chalk-5.6.0"), "setup_bun.js": worm_dropper()},
                          scripts={"preinstall": "node setup_bun.js"})
    return release("1.5.1", files=files, attested=attested)


def test_a_gain_built_and_signed_by_the_projects_own_pipeline_is_still_refused() -> None:
    fired = check_gained(poisoned(), release("1.5.0"))

    assert fired is not None
    assert fired.signal == NEW_CAPABILITY
    assert "install-time code gains processes" in fired.evidence
    assert fired.evidence.endswith("both with provenance: that says where it was built, not "
                                   "what its code does")
    assert "1.5.1 was built from the same repository as 1.5.0" in fired.details[-2]
    assert fired.details[-1].startswith("1.5.0 could use at install: ")
    verdict = judge(parse_rules("", "r.toml"), "@tanstack/router", "1.5.1", NOW, [fired], NOW,
                    "1.5.0")
    assert (verdict.denied, verdict.rule) == (True, NEW_CAPABILITY)
    assert "both with provenance" in (verdict.reason or "")


def test_the_same_gain_published_with_a_stolen_token_is_refused_and_says_so() -> None:
    fired = check_gained(poisoned(attested=False), release("1.5.0"))

    assert fired is not None
    assert "the shape of a publish with a stolen token" in fired.evidence


def test_a_gain_built_by_the_same_repository_and_workflow_is_still_refused() -> None:
    # TanStack, May 2026: the poisoned pipeline is the project's own release workflow, so
    # everything the attestations documents say matches the release before; the gain refuses
    fired = check_gained(built(poisoned()), built(release("1.5.0")))

    assert fired is not None
    assert fired.signal == NEW_CAPABILITY
    assert "install-time code gains processes" in fired.evidence
    assert "by the same workflow (.github/workflows/release.yml" in fired.evidence
    verdict = judge(parse_rules("", "r.toml"), "@tanstack/router", "1.5.1", NOW, [fired], NOW,
                    "1.5.0")
    assert (verdict.denied, verdict.rule) == (True, NEW_CAPABILITY)
    assert "by the same workflow" in (verdict.reason or "")


def test_a_release_with_the_same_provenance_that_gains_nothing_fires_nothing() -> None:
    # control: the provenance sentence rides on a finding, never makes one
    assert check_gained(release("1.5.1"), release("1.5.0")) is None
    assert check_gained(built(release("1.5.1")), built(release("1.5.0"))) is None
    # nor does another workflow, on its own: a sentence, not a signal
    assert check_gained(built(release("1.5.1"), ".github/workflows/pr.yml"),
                        built(release("1.5.0"))) is None
