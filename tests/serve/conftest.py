"""Fixtures of the serve suite: `start_proxy` (see rig.py) and `private_registry`, the session's
private Verdaccio as the current test sees it (see `SharedPrivate`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mirrorgate.mirror import MirrorQueue
from mirrorgate.rules import DEFAULT_RULES, LiveRules, Rules
from mirrorgate.upstream.registry import store_root
from tests.serve.rig import (
    FILE_STORE,
    ProxyStack,
    RunningProxy,
    SharedPrivate,
    StartProxy,
    make_settings,
    open_proxy,
    requested_names,
)
from tests.servers.availability import serving
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.verdaccio import Verdaccio


@pytest.fixture(scope="session")
def shared_verdaccio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Verdaccio]:
    # one for the session: a Verdaccio takes about a second to start, and every test keeps to
    # package names of its own (enforced through `private_registry`)
    with serving(Verdaccio(tmp_path_factory.mktemp("verdaccio")), "Verdaccio") as server:
        yield server


@pytest.fixture(scope="session")
def private_claims() -> dict[str, str]:
    """Package name -> the test that published it in the shared Verdaccio."""
    return {}


@pytest.fixture
def private_registry(shared_verdaccio: Verdaccio, private_claims: dict[str, str],
                     request: pytest.FixtureRequest) -> SharedPrivate:
    owner = f"{request.node.path.name}::{getattr(request.node, 'originalname', request.node.name)}"
    return SharedPrivate(shared_verdaccio, private_claims, owner)


@pytest.fixture
async def start_proxy(tmp_path: Path, private_registry: SharedPrivate,
                      request: pytest.FixtureRequest) -> AsyncIterator[StartProxy]:
    """Start proxies for this test: `await start_proxy(public_registry.url, rules=...,
    cache_ttl=...)`. The private upstream is the shared Verdaccio (with its token) unless
    `private=` says otherwise: `FILE_STORE` for an empty embedded file store, a `file://`
    URL for an existing one, or a registry URL. The data directory is one per proxy unless
    `data_dir` names one to share, as a restarted process would. Everything started is
    stopped at teardown."""
    stacks: list[ProxyStack] = []

    async def start(public: str, *, private: str | None = None,
                    rules: Rules | LiveRules = DEFAULT_RULES, queue: MirrorQueue | None = None,
                    data_dir: Path | None = None, **overrides: Any) -> RunningProxy:
        index = len(stacks)
        store: Path | None = None
        token: str | None = None
        if private is None:
            private, token = private_registry.url, private_registry.token
        elif private == FILE_STORE:
            store = tmp_path / f"store-{index}"
            private = f"file://{store}"
        elif private.startswith("file://"):
            store = store_root(private)  # an existing store (another proxy's, say)
        settings = make_settings(public, private, data_dir or tmp_path / f"data-{index}",
                                 token=token, **overrides)
        stacks.append(await open_proxy(settings, store=store, rules=rules, queue=queue))
        return stacks[-1].running

    yield start
    for stack in reversed(stacks):
        await stack.close()
    if "public_registry" in request.fixturenames:  # no public name may be another test's private
        public: FixtureRegistry = request.getfixturevalue("public_registry")
        private_registry.check_unclaimed(requested_names(seen.path for seen in public.requests))
