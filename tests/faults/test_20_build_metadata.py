"""Row 20 of the faults table: versions with build metadata, which Verdaccio dies of.

> | 20 | a public version with build metadata (`1.0.0+b`), a publish of `1.2.0+b` through
> mirrorgate, and a private `1.1.0+shadow` beside public's `1.1.0` | the public version
> installs from public and is never sent to the private registry (no job; a forged one is
> retired `unstorable-version`); the publish is a 400 naming the version; the shadow is a 409;
> Verdaccio stays up and first-party installs keep working |

The attack: anyone who can publish a public package publishes `x@1.0.0+b`; one client's pull
made the worker send its tarball to Verdaccio 6.8, which exits on it (an uncaught
`AssertionError` from `validateName`), and every first-party install failed from then on.
Real `mirrorgate serve`, real Verdaccio, the real npm client.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.access.rig import SecretDir
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.publish.stack import forged_document, start_stack
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version
from tests.servers.processes import http_request, wait_for
from tests.servers.verdaccio import Verdaccio


def alive(verdaccio: Verdaccio) -> bool:
    try:
        return http_request("GET", verdaccio.url + "-/ping", timeout=2).status == 200
    except OSError:
        return False


def test_a_public_version_with_build_metadata_installs_but_never_reaches_verdaccio(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient,
) -> None:
    public_registry.add(make_package("bmeta", [make_version("bmeta", "0.9.0"),
                                               make_version("bmeta", "1.0.0+b")]))
    verdaccio.publish(make_package("@acme/internal", ["2.0.0"]).version("2.0.0"))
    proxy = guarded("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                              "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
                              "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token})
    npm_client.write_project({"bmeta": "^1.0.0"})  # npm resolves a range to 1.0.0+b

    done = npm_client.install(registry=proxy.registry_url)

    assert done.returncode == 0, done.stderr
    assert npm_client.installed() == {"bmeta": "1.0.0+b"}
    wait_for(lambda: proxy.events("job_not_enqueued"), timeout=10)
    [skipped] = proxy.events("job_not_enqueued")
    assert skipped["package"] == "bmeta"
    assert "build metadata" in skipped["reason"]
    time.sleep(1.0)  # a job, had there been one, is published within a second of the pull
    assert alive(verdaccio)
    assert verdaccio.versions("bmeta") == []
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 0
    # the organisation's own packages still install from the private registry
    npm_client.write_project({"@acme/internal": "2.0.0"})
    again = npm_client.install(registry=proxy.registry_url)
    assert again.returncode == 0, again.stderr


def test_a_publish_with_build_metadata_is_refused_naming_the_version_and_verdaccio_lives(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, tmp_path: Path,
) -> None:
    stack = start_stack(guarded, guard, public_registry, verdaccio,
                        SecretDir(tmp_path / "client-tokens"), tmp_path)
    build = make_package("@acme/widget", [make_version("@acme/widget", "1.2.0+b")])

    reply = stack.put("@acme/widget", forged_document(build.version("1.2.0+b")))

    assert reply.status == 400
    said = json.loads(reply.body)["error"]
    assert "1.2.0+b carries build metadata" in said
    assert "publish 1.2.0 instead" in said
    assert alive(verdaccio)
    assert verdaccio.packument("@acme/widget") is None


def test_a_private_shadow_of_a_public_version_is_refused_as_the_same_version(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, tmp_path: Path,
) -> None:
    # `acme-shared` is merged with its public namesake on purpose (`merge_public`): public's
    # 1.1.0 is taken, and semver ranks 1.1.0+shadow equal to it, so npm would install either
    public_registry.add(make_package("acme-shared", ["1.0.0", "1.1.0"]))
    stack = start_stack(guarded, guard, public_registry, verdaccio,
                        SecretDir(tmp_path / "client-tokens"), tmp_path)
    shadow = make_package("acme-shared", [make_version("acme-shared", "1.1.0+shadow")])

    reply = stack.put("acme-shared", forged_document(shadow.version("1.1.0+shadow")))

    assert reply.status == 400
    assert "1.1.0+shadow carries build metadata" in json.loads(reply.body)["error"]
    assert alive(verdaccio)
    assert verdaccio.packument("acme-shared") is None
