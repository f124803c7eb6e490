"""The proxy through the real `mirrorgate serve` command, watched from outside: npm installs
through it, the rules file gates, and /metrics and the JSON log say what happened. Its
worker mirrors the tree into a Verdaccio of its own (not the suite's shared one)."""

from __future__ import annotations

from pathlib import Path

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import install_script_version, make_package, standard_tree
from tests.servers.verdaccio import Verdaccio


def test_mirrorgate_serve_installs_a_tree_gates_by_the_rules_file_and_reports_it(
    public_registry: FixtureRegistry, verdaccio: Verdaccio,
    mirrorgate: MirrorgateFactory, npm_client: NpmClient, tmp_path: Path,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages, make_package("scripted-cli", [
        "1.0.0", install_script_version("scripted-cli", "1.1.0")]))
    rules = tmp_path / "rules.toml"
    rules.write_text("[install_scripts]\nblock = true\n", encoding="utf-8")
    proxy = mirrorgate("serve", {
        "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
        "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
        "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token,
        "MIRRORGATE_RULES_FILE": str(rules),
    })
    npm_client.registry = proxy.registry_url
    npm_client.write_project(tree.dependencies)

    installed = npm_client.install()
    denied = npm_client.install("scripted-cli@1.1.0")

    assert installed.returncode == 0, installed.stderr
    assert npm_client.installed() == tree.resolved
    assert denied.returncode != 0
    assert "E403" in denied.stderr
    assert "- 1.1.0 (install-scripts): " in denied.stderr
    assert proxy.metric("mirrorgate_requests_total", route="tarball", status="200") == 6
    assert proxy.metric("mirrorgate_requests_total", route="packument", status="200") >= 7
    assert proxy.metric("mirrorgate_rule_denials_total", rule="install-scripts") == 1
    assert proxy.metric("mirrorgate_jobs_enqueued_total") == 6
    served = proxy.events("tarball_served")
    assert len(served) == 6
    assert all(entry["request_id"] and entry["upstream"] == "public" for entry in served)
    assert {entry["package"] for entry in proxy.events("job_enqueued")} == set(tree.resolved)
    filled = [entry for entry in proxy.events("packument_filled")
              if entry["package"] == "scripted-cli"]
    assert filled[0]["denied"] == 1
    assert verdaccio.token not in proxy.stderr()
