"""Provenance as evidence, not as a pass, through the real npm client and a real `mirrorgate
serve` on the default policy (no rules file), Verdaccio as the private registry: when a
release and the release it is compared with both carry provenance, the judge reads the
workflow each was built by from the attestations documents the public upstream serves, and
the verdict says it; a gain is refused whoever built it (TanStack, May 2026: the project's
own poisoned release workflow). docs/verdicts.md#provenance-is-evidence-not-a-pass.

No payload runs: npm installs with scripts off, and their hosts are `.test` names.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_capabilities import GAINED, _ago, _release, admitted, refused
from tests.e2e.test_release_attacks import install, start
from tests.servers.attestations import attestations_document, attested
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package
from tests.servers.payloads import worm_dropper
from tests.servers.processes import MirrorgateProcess
from tests.servers.verdaccio import Verdaccio

REPOSITORY = "https://github.com/example/router"
RELEASE_YML = ".github/workflows/release.yml"
# a preinstall both releases run, which makes code at install (so the release before is
# compared) that a release nothing vouches for may run: the control admitted beside a worm
VM_SETUP = b"const vm = require('vm');\nconsole.log('thanks for installing', " \
           b"vm.runInNewContext('1 + 1'));\n"


def publish(public: FixtureRegistry, name: str, changed: dict[str, bytes], script: str, *,
            paths: tuple[str, str] = (RELEASE_YML, RELEASE_YML),
            documents: bool = True) -> None:
    """`name`: 1.0.0 a year old and 1.0.1 two days old, each published with provenance by a
    CI run of REPOSITORY, built by `paths` (1.0.0's, 1.0.1's) at its own tag; 1.0.0 runs
    VM_SETUP at install, 1.0.1 `changed` under `script`. `documents`: the public registry
    serves their attestations documents."""
    repository = {"type": "git", "url": f"git+{REPOSITORY}.git"}
    versions = [
        attested(_release(name, "1.0.0", "chalk-5.6.0", _ago(365), {"setup.js": VM_SETUP},
                          repository=repository, scripts={"preinstall": "node setup.js"})),
        attested(_release(name, "1.0.1", "chalk-5.6.0", _ago(2), changed,
                          repository=repository, scripts={"preinstall": f"node {script}"}))]
    public.add(make_package(name, versions))
    if documents:
        for version, path in zip(versions, paths, strict=True):
            public.attest(name, version.version, attestations_document(
                version, repository=REPOSITORY, path=path, ref=f"refs/tags/v{version.version}"))


def fetched(public: FixtureRegistry, name: str) -> list[str]:
    """The attestations documents of `name` asked of the public registry, in order."""
    return [request.path for request in public.requests
            if request.path.startswith(f"/-/npm/v1/attestations/{name}@")]


def checked(proxy: MirrorgateProcess, name: str) -> dict[str, object]:
    [event] = [event for event in proxy.events("release_checked")
               if event["package"] == name and event["version"] == "1.0.1"]
    return event


def test_a_gain_built_by_the_same_repository_and_workflow_is_still_refused_and_says_so(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # TanStack, May 2026: the project's own release workflow, poisoned, built and signed a
    # release whose new preinstall fetches a runtime and spawns it. Everything provenance
    # says matches the release before: repository, workflow; only the tag differs. Beside it,
    # a release built the same way whose preinstall changed within what it could do
    publish(public_registry, "signed-worm", {"setup_bun.js": worm_dropper()}, "setup_bun.js")
    publish(public_registry, "signed-twin",
            {"setup.js": VM_SETUP + b"console.log('and thanks again');\n"}, "setup.js")
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    refusal = refused(npm_client, proxy, verdaccio, "signed-worm", GAINED, "1.0.0")
    admitted(npm_client, proxy, verdaccio, "signed-twin", "1.0.1")

    said = ("1.0.1 was built from the same repository as 1.0.0 (github.com/example/router) by "
            "the same workflow (.github/workflows/release.yml, at refs/tags/v1.0.1; 1.0.0 at "
            "refs/tags/v1.0.0), both with provenance: that says where it was built, not what "
            "its code does")
    assert said in refusal["reason"]
    assert said in refusal["evidence"]
    assert any(item.startswith("install-time code gains processes")
               for item in refusal["evidence"])
    # the clean release's verdict says it too, though nothing fired
    twin = checked(proxy, "signed-twin")
    assert (twin["outcome"], twin["compared_with"], twin["built"]) == ("clean", "1.0.0", said)
    # each document asked once, of the configured public upstream (never the host its
    # `dist.attestations.url` names), with the name as npm spells it in a path
    assert sorted(fetched(public_registry, "signed-twin")) == [
        "/-/npm/v1/attestations/signed-twin@1.0.0", "/-/npm/v1/attestations/signed-twin@1.0.1"]
    assert proxy.metric("mirrorgate_release_attestations_total", outcome="read") == 4
    # a warm pull reads the kept verdict: no document is fetched again
    again = install(npm_client, proxy, {"signed-twin": "^1.0.0"})
    assert again.returncode == 0, again.stderr
    assert len(fetched(public_registry, "signed-twin")) == 2


def test_another_workflow_is_said_and_a_document_that_cannot_be_read_is_said_not_read(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, npm_client: NpmClient,
    mirrorgate: MirrorgateFactory, tmp_path: Path,
) -> None:
    # the worm built by a workflow the releases before never used (one a pull request added):
    # refused for its gain, the other workflow named beside it. Beside it, a clean release
    # whose attestations documents the public registry does not serve: admitted as before,
    # its verdict saying the workflow was not read and why (never a refusal, never a pass)
    publish(public_registry, "preview-worm", {"setup_bun.js": worm_dropper()},
            "setup_bun.js", paths=(RELEASE_YML, ".github/workflows/pr-preview.yml"))
    publish(public_registry, "unread-twin",
            {"setup.js": VM_SETUP + b"console.log('and thanks again');\n"}, "setup.js",
            documents=False)
    proxy = start(mirrorgate, public_registry, verdaccio, tmp_path, rules=None)

    refusal = refused(npm_client, proxy, verdaccio, "preview-worm", GAINED, "1.0.0")
    admitted(npm_client, proxy, verdaccio, "unread-twin", "1.0.1")

    assert ("1.0.1 was built from the same repository as 1.0.0 (github.com/example/router), "
            "by another workflow: .github/workflows/pr-preview.yml of github.com/example/router,"
            " where 1.0.0 was built by .github/workflows/release.yml of "
            "github.com/example/router, both with provenance") in refusal["reason"]
    built = str(checked(proxy, "unread-twin")["built"])
    assert built.startswith("1.0.1 was built from the same repository as 1.0.0 "
                            "(github.com/example/router), its workflow not read (1.0.1's: the "
                            "public registry has no attestations document for 1.0.1; 1.0.0's: ")
    unread = [event for event in proxy.events("release_attestations_unread")
              if event["package"] == "unread-twin"]
    assert sorted(event["version"] for event in unread) == ["1.0.0", "1.0.1"]
    assert proxy.metric("mirrorgate_release_attestations_total", outcome="unread") == 2
