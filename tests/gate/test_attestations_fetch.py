"""The judge's fetch of a version's attestations document (`ReleaseJudge.workflow`), against
the fixture public registry with its faults: read once per version and kept, bounded in time
and size, and what cannot be had (down, hanging, not JSON, no provenance in it) said "not read"
with why, logged and counted, never raised into the verdict: provenance is evidence, never a
refusal and never a pass (docs/verdicts.md#provenance-is-evidence-not-a-pass)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from urllib.parse import unquote

import orjson
import pytest

from mirrorgate.gate.records import VersionRecord
from mirrorgate.gate.verdicts.judge import ReleaseJudge
from mirrorgate.metrics import Metrics
from mirrorgate.npm.attestations import Workflow
from mirrorgate.npm.names import parse_name
from mirrorgate.rules import parse_rules
from mirrorgate.upstream.client import Upstream
from tests.metric_samples import metric_value, registry_samples
from tests.servers.attestations import attestations_document
from tests.servers.fixture_registry import Fault, FixtureRegistry
from tests.servers.packages import make_version

NAME = parse_name("@example/router")
VERSION = make_version("@example/router", "2.0.1", files={"index.js": b"x" * 4000})
PATH = "/-/npm/v1/attestations/@example%2frouter@2.0.1"
RECORD = VersionRecord("2.0.1", False, b"{}", b"{}")


@pytest.fixture
async def judge(public_registry: FixtureRegistry) -> AsyncIterator[ReleaseJudge]:
    metrics = Metrics()
    public = Upstream("public", public_registry.url, timeout=0.5,
                      max_metadata_bytes=32 << 20, metrics=metrics)
    await public.start()

    async def fill(_name: object) -> None:
        return None
    yield ReleaseJudge(rules=parse_rules("", "r.toml"), public=public, metrics=metrics,
                       packument=fill, now=lambda: datetime.now(UTC),
                       previous_max_bytes=1 << 20, timeout=0.5)
    await public.close()


def served(public: FixtureRegistry) -> None:
    public.attest(NAME.full, "2.0.1", attestations_document(
        VERSION, repository="https://github.com/example/router",
        path=".github/workflows/release.yml", ref="refs/tags/v2.0.1"))


def asked(public: FixtureRegistry) -> int:
    # the client sends `%2F` for npm's `%2f`: the same path to a registry
    return sum(1 for request in public.requests if unquote(request.path) == unquote(PATH))


def count(judge: ReleaseJudge, outcome: str) -> float:
    return metric_value(registry_samples(judge.metrics.registry),
                        "mirrorgate_release_attestations_total", outcome=outcome)


async def test_a_document_is_read_once_and_kept(public_registry: FixtureRegistry,
                                                judge: ReleaseJudge) -> None:
    served(public_registry)

    first = await judge.workflow(NAME, RECORD)
    second = await judge.workflow(NAME, RECORD)

    assert first == second == Workflow("github.com/example/router",
                                       ".github/workflows/release.yml", "refs/tags/v2.0.1")
    assert asked(public_registry) == 1
    assert count(judge, "read") == 1


@pytest.mark.parametrize(("fault", "why", "kept"), [
    (Fault(status=503), "could not be fetched: public upstream: answered 503", False),
    (Fault(delay=2.0), "was not fetched within 0.5 s", False),
    (Fault(body=b"<html>captive portal</html>"), "cannot be read: public upstream: the "
     "document is not usable JSON", True),
    (Fault(body=orjson.dumps({"attestations": []})), "cannot be read: it holds no SLSA "
     "provenance attestation", True),
    (Fault(body=b'{"attestations": "' + b"x" * (1 << 20) + b'"}'), "attestations document "
     "is 1,048,596 bytes, over the 1,048,576 read", True),
])
async def test_a_document_that_cannot_be_had_is_said_not_read_never_raised(
    public_registry: FixtureRegistry, judge: ReleaseJudge, fault: Fault, why: str, kept: bool,
) -> None:
    served(public_registry)
    public_registry.fault(PATH, fault, exact=True)

    found = await judge.workflow(NAME, RECORD)

    assert isinstance(found, str)
    assert why in found
    assert count(judge, "unread") == 1
    # what the document itself says is kept; an outage is asked again at the next verdict
    public_registry.clear_faults()
    again = await judge.workflow(NAME, RECORD)
    assert (again == found) is kept
    assert isinstance(again, str if kept else Workflow)


async def test_a_missing_document_is_said_not_read(public_registry: FixtureRegistry,
                                                   judge: ReleaseJudge) -> None:
    found = await judge.workflow(NAME, RECORD)

    assert found == "the public registry has no attestations document for 2.0.1"
