"""`mirrorgate audit` (and prewarm's refusals) as a CI step sees them: exit codes, `--json`, and
the `--proxy` modes against a running `mirrorgate serve`.
"""

from __future__ import annotations

from pathlib import Path

from mirrorgate.access.tokens import new_token, token_line
from tests.commands.mirrored import locked_by_npm, published_tree, run_command
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.verdaccio import Verdaccio


def test_audit_names_a_changed_tarball_a_missing_one_and_a_new_denial_and_exits_1(
    public_registry: FixtureRegistry, npm_client: NpmClient, tmp_path: Path,
) -> None:
    tree = published_tree(public_registry)
    lockfile = locked_by_npm(npm_client, public_registry, tree)
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url}
    assert run_command(["prewarm", str(lockfile)], env, tmp_path).returncode == 0
    clean = run_command(["audit", "--json"], env, tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert clean.json()["summary"] == {"ok": len(tree.resolved)}

    store = tmp_path / "data" / "store"
    changed = store / "delta" / "tarballs" / "delta-0.4.2.tgz"
    data = bytearray(changed.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte flipped in place: same size, other bytes
    changed.write_bytes(bytes(data))
    (store / "@fixture" / "beta" / "tarballs" / "beta-2.1.3.tgz").unlink()
    rules = tmp_path / "rules.toml"
    rules.write_text('[deny]\npackages = ["gamma@3.1.0"]\n', encoding="utf-8")
    today = {**env, "MIRRORGATE_RULES_FILE": str(rules)}

    found = run_command(["audit", "--json"], today, tmp_path)

    assert found.returncode == 1, found.stderr
    assert found.statuses() == {"alpha@1.2.0": "ok", "@fixture/beta@2.1.3": "missing_tarball",
                                "gamma@3.1.0": "refused", "delta@0.4.2": "tampered",
                                "epsilon@1.2.0": "ok", "zeta@1.0.1": "ok"}
    assert found.json()["findings"] == 3
    tampered = next(r for r in found.json()["results"] if r["status"] == "tampered")
    assert tampered["admitted"] == public_registry.package("delta").version("0.4.2").integrity
    assert tampered["stored"] != tampered["admitted"]
    table = run_command(["audit"], today, tmp_path)
    assert table.returncode == 1
    assert "PACKAGE" in table.stdout
    assert "audit: 3 finding(s) in 6 result(s)" in table.stdout
    assert (store / "gamma" / "versions" / "3.1.0.json").exists()  # reported, not deleted


def test_prewarm_exits_1_on_a_denied_locked_version_and_2_on_a_malformed_lockfile(
    public_registry: FixtureRegistry, npm_client: NpmClient, tmp_path: Path,
) -> None:
    tree = published_tree(public_registry)
    lockfile = locked_by_npm(npm_client, public_registry, tree)
    rules = tmp_path / "rules.toml"
    rules.write_text('[deny]\npackages = ["epsilon"]\n', encoding="utf-8")
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
           "MIRRORGATE_RULES_FILE": str(rules)}

    denied = run_command(["prewarm", str(lockfile), "--json"], env, tmp_path)

    assert denied.returncode == 1, denied.stderr
    statuses = denied.statuses()
    assert statuses.pop("epsilon@1.2.0") == "refused"
    assert set(statuses.values()) == {"published"}
    refused = next(r for r in denied.json()["results"] if r["status"] == "refused")
    assert refused["reason"].startswith("deny-list")
    assert refused["finding"] is True

    broken = tmp_path / "broken" / "package-lock.json"
    broken.parent.mkdir()
    text = lockfile.read_text(encoding="utf-8").splitlines()
    broken.write_text("\n".join([*text[:5], "  oops", *text[5:]]), encoding="utf-8")
    malformed = run_command(["prewarm", str(broken)], env, tmp_path)
    assert malformed.returncode == 2
    assert f"{broken}:" in malformed.stderr

    unreadable = run_command(["prewarm", str(lockfile)],
                             {**env, "MIRRORGATE_RULES_FILE": str(tmp_path / "nope.toml")},
                             tmp_path)
    assert unreadable.returncode == 2
    assert "MIRRORGATE_RULES_FILE" in unreadable.stderr


def test_auditing_a_registry_needs_the_names_and_says_so_with_exit_2(
    public_registry: FixtureRegistry, verdaccio: Verdaccio, tmp_path: Path,
) -> None:
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
           "MIRRORGATE_PRIVATE_UPSTREAM": verdaccio.url,
           "MIRRORGATE_PRIVATE_TOKEN": verdaccio.token}

    unnamed = run_command(["audit"], env, tmp_path)

    assert unnamed.returncode == 2
    assert "--search" in unnamed.stderr
    assert verdaccio.token not in unnamed.stdout + unnamed.stderr
    searched = run_command(["audit", "--search", "--json"], env, tmp_path)
    assert searched.returncode == 0, searched.stderr
    assert searched.json()["results"] == []


def test_through_a_running_proxy_prewarm_pulls_and_waits_and_audit_finds_tampered_bytes(
    public_registry: FixtureRegistry, npm_client: NpmClient, mirrorgate: MirrorgateFactory,
    tmp_path: Path,
) -> None:
    """The laptop has the proxy's address and nothing else: no upstream, queue or store."""
    tree = published_tree(public_registry)
    lockfile = locked_by_npm(npm_client, public_registry, tree)
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_CACHE_TTL": "1"})
    laptop = {"MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/",
              "MIRRORGATE_PRIVATE_UPSTREAM": "http://127.0.0.1:10/"}

    pulled = run_command(["prewarm", str(lockfile), "--proxy", proxy.url, "--wait",
                          "--timeout", "60", "--json"], laptop, tmp_path)

    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert pulled.statuses() == {f"{n}@{v}": "published" for n, v in tree.resolved.items()}
    store = proxy.workdir / "data" / "store"
    changed = store / "zeta" / "tarballs" / "zeta-1.0.1.tgz"
    changed.write_bytes(changed.read_bytes()[::-1])

    audited = run_command(["audit", str(lockfile), "--proxy", proxy.url, "--json"], laptop,
                          tmp_path)

    assert audited.returncode == 1, audited.stderr
    assert audited.statuses() == {**{f"{n}@{v}": "ok" for n, v in tree.resolved.items()},
                                  "zeta@1.0.1": "tampered"}
    again = run_command(["prewarm", str(lockfile), "--proxy", proxy.url, "--json"], laptop,
                        tmp_path)
    assert again.json()["summary"] == {"already_present": len(tree.resolved)}


def test_through_a_proxy_that_wants_a_token_prewarm_and_audit_stop_at_once_naming_the_variable(
    public_registry: FixtureRegistry, npm_client: NpmClient, mirrorgate: MirrorgateFactory,
    tmp_path: Path,
) -> None:
    # Seen by hand: without MIRRORGATE_PROXY_TOKEN, `prewarm --proxy` and `audit --proxy`
    # printed one "proxy upstream: answered 401" failure per locked name and exited 1, with
    # nothing saying which variable was missing.
    tree = published_tree(public_registry)
    lockfile = locked_by_npm(npm_client, public_registry, tree)
    tokens = tmp_path / "tokens"
    token = new_token()
    tokens.write_text(token_line("ci", token) + "\n", encoding="utf-8")
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens)})
    laptop = {"MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/",
              "MIRRORGATE_PRIVATE_UPSTREAM": "http://127.0.0.1:10/"}

    for command in ("prewarm", "audit"):
        refused = run_command([command, str(lockfile), "--proxy", proxy.url], laptop, tmp_path)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "requires a client token: set MIRRORGATE_PROXY_TOKEN" in refused.stderr
        assert "PACKAGE" not in refused.stdout  # no table of per-name failures
    pulled = run_command(["prewarm", str(lockfile), "--proxy", proxy.url, "--json"],
                         {**laptop, "MIRRORGATE_PROXY_TOKEN": token}, tmp_path)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert token not in pulled.stdout + pulled.stderr
