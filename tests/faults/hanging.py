"""A mirror target that takes connections and never answers: the worker takes its first batch
and stalls on it, so a burst exercises the serve path and the queue alone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiohttp import web

from tests.servers.availability import serving
from tests.servers.threaded import ThreadedApp

__all__ = ["hanging_target"]


async def _never_answer(_request: web.Request) -> web.StreamResponse:
    await asyncio.Event().wait()  # cancelled when the target stops
    raise AssertionError("unreachable")


def _hanging_app() -> web.Application:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _never_answer)
    return app


@pytest.fixture
def hanging_target() -> Iterator[ThreadedApp]:
    with serving(ThreadedApp(_hanging_app, name="hanging-target"),
                 "the hanging mirror target") as target:
        yield target
