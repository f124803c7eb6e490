"""The worker judges a job's version by its release verdict, and reads and judges the bytes
first when there is none (docs/verdicts.md): a job nobody's pull judged (a sidecar's, one
written by anyone with send rights to the queue) never publishes a version the proxy would
refuse. The attack: the Shai-Hulud shape's 1.4.3 enqueued straight onto the queue.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mirrorgate.npm.names import parse_name
from mirrorgate.rules import parse_rules
from mirrorgate.upstream.filestore import FileStore
from tests.serve.rig import RunningProxy, make_settings, open_proxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.incidents import shai_hulud_shape
from tests.servers.packages import tarball_path
from tests.worker.rig import handled, in_process_worker, job_from

RULES = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")


@pytest.fixture
async def proxy(public_registry: FixtureRegistry, tmp_path: Path) -> AsyncIterator[RunningProxy]:
    """A proxy as `mirrorgate serve` builds it with its worker, the release signals on."""
    private = tmp_path / "private"
    settings = make_settings(public_registry.url, f"file://{private}", tmp_path / "data")
    stack = await open_proxy(settings, store=private, rules=RULES, queue=None,
                             worker_beside=True)
    yield stack.running
    await stack.close()


async def test_a_job_for_a_version_never_judged_is_judged_first_and_a_refusal_retires_it(
        public_registry: FixtureRegistry, proxy: RunningProxy, tmp_path: Path) -> None:
    public_registry.add(shai_hulud_shape())
    worker = in_process_worker(proxy, tmp_path / "store")

    outcome = await handled(worker, job_from(public_registry, "worm-host", "1.4.3"))

    assert outcome == "retired"
    assert await FileStore(tmp_path / "store").packument(parse_name("worm-host")) is None
    verdict = proxy.server.gate.release.remembered("worm-host", "1.4.3")
    assert verdict is not None  # kept: the proxy refuses it at once, without a read
    assert (verdict.rule, verdict.compared_with) == ("new-install-script", "1.4.2")
    public_registry.clear_requests()
    refused = await proxy.get("npm" + tarball_path("worm-host", "1.4.3"))
    assert refused.status == 403
    assert not any(seen.path.endswith(".tgz") for seen in public_registry.requests)

    clean = await handled(worker, job_from(public_registry, "worm-host", "1.4.2"))
    assert clean == "published"  # the clean release of the same package
