"""Fixtures of the gate suite: the serve suite's proxy (`start_proxy`), for the few cases that
check through a running proxy what the gate decided, and the state store's (`place`)."""

from tests.serve.conftest import (  # noqa: F401 - fixtures, found by name
    private_claims,
    private_registry,
    shared_verdaccio,
    start_proxy,
)
from tests.store.conftest import place, store  # noqa: F401 - the store suite's stores
