"""Shared test configuration: the real servers the suites use are fixtures in tests/servers/.

A server that cannot be started is a skip on a laptop and a failure in CI (CI=1), except the
Pub/Sub emulator, which cannot be installed from the registries these machines reach and is
skipped with a printed reason wherever it is absent.
"""

pytest_plugins = [
    "tests.servers.fixtures",
    "tests.servers.sqs_server",
    "tests.servers.pubsub_server",
]
