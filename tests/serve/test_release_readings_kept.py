"""The release signals keep the last versions' readings (`npm.contents.KeptReadings`): a
predecessor this process read before is neither fetched nor read again, and still judges the
next release as a fresh read would (docs/serving.md#release-signals)."""

from __future__ import annotations

from mirrorgate.rules import parse_rules
from tests.serve.rig import StartProxy
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.incidents import entry_file, obfuscated_blob
from tests.servers.packages import fresh_version, make_package, make_version, tarball_path

RULES = parse_rules('[age]\nminimum = "0"\n\n[release]\n', "rules.toml")


async def test_a_predecessor_read_at_its_own_first_pull_is_not_fetched_again(
        public_registry: FixtureRegistry, start_proxy: StartProxy) -> None:
    entry = entry_file("steady")
    package = make_package("steady-pkg", [
        make_version("steady-pkg", "3.0.0", files={"index.js": entry, "lib/a.js": b"a=1;\n"}),
        make_version("steady-pkg", "3.0.1", files={"index.js": entry, "lib/a.js": b"a=2;\n"}),
        fresh_version("steady-pkg", "3.0.2",
                      files={"index.js": entry + obfuscated_blob("steady"),
                             "lib/a.js": b"a=2;\n"})])
    public_registry.add(package)
    proxy = await start_proxy(public_registry.url, rules=RULES)

    first = await proxy.get("npm" + tarball_path("steady-pkg", "3.0.1"))
    assert first.status == 200
    public_registry.clear_requests()
    refused = await proxy.get("npm" + tarball_path("steady-pkg", "3.0.2"))

    fetched = [seen.path for seen in public_registry.requests]
    assert "/steady-pkg/-/steady-pkg-3.0.1.tgz" not in fetched  # read at its own pull
    assert refused.status == 403, refused.body
    body = refused.json()
    assert (body["rule"], body["compared_with"]) == ("obfuscated-code", "3.0.1")
    assert any(item.startswith("index.js: obfuscator-style `_0x` identifiers")
               for item in body["evidence"])
