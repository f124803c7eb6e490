"""The client tokens file: what it accepts, what it refuses (by line), and how it is re-read.

The attacks: a token guessed or borrowed from another client, a file rotated by an operator who
mistypes a line (the proxy must not fall open, nor lock everyone out), and a Secret rotated by
Kubernetes' symlink swap, which keeps size and mtime and changes only the inode.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from mirrorgate.access.decision import presented_token
from mirrorgate.access.tokens import (
    ClientTokens,
    ClientTokensError,
    new_token,
    parse_clients,
    parse_tokens_file,
    policy_problem,
    token_line,
)
from mirrorgate.rules import DEFAULT_RULES, parse_rules

ALICE = "alice-token-0123456789"
BOB = "bob-token-9876543210"


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def test_a_file_lists_clients_with_comments_and_an_optional_publish_grant() -> None:
    text = (f"# CI and people\n\nci {digest(ALICE)}   # the build farm\n"
            f"release-bot {digest(BOB)} publish:@team-a/*,team-a-*\n")

    clients = parse_clients(text, "tokens")

    assert [(c.name, c.publish.texts()) for c in clients] == [
        ("ci", []), ("release-bot", ["@team-a/*", "team-a-*"])]
    assert clients[0].digest == hashlib.sha256(ALICE.encode()).digest()
    assert clients[1].may_write("@team-a/widget")
    assert clients[1].may_write("team-a-cli")
    assert not clients[1].may_write("@team-b/widget")
    assert not clients[0].may_write("@team-a/widget")


@pytest.mark.parametrize(("line", "expected"), [
    (f"ci {digest(ALICE)} admin", "line 2: unknown permission 'admin'"),
    ("ci sha256:abc", "line 2: the second column must be `sha256:`"),
    (f"ci {ALICE}", "line 2: the second column must be `sha256:`"),
    ("ci", "line 2: expected `NAME sha256:HEX [publish:NAMES] [policy:NAME]`"),
    (f"ci {digest(ALICE)} policy:", "line 2: `policy:` names a policy set"),
    (f"ci {digest(ALICE)} policy:Payments", "line 2: `policy:` names a policy set"),
    (f"ci {digest(ALICE)} policy:a policy:b", "line 2: `policy:` is given twice"),
    (f"ci {digest(ALICE)} publish:a-* publish:b-*", "line 2: `publish:` is given twice"),
    # a bare grant reached every name [publish] covers: one leaked token rewrote every team's
    (f"ci {digest(ALICE)} publish", "line 2: `publish` must name the packages"),
    (f"ci {digest(ALICE)} publish:", "line 2: `publish` must name the packages"),
    (f"ci {digest(ALICE)} publish:@team-a/widget@^1", "line 2: '@team-a/widget@^1' names"),
    (f"c/i {digest(ALICE)}", "line 2: the name 'c/i' must be"),
    (f"one {digest(ALICE)}", "line 2: this digest is already another client's"),
    (f"ops {digest(BOB)}", "line 2: the client 'ops' is listed twice"),
])
def test_a_bad_line_is_refused_naming_its_number(line: str, expected: str) -> None:
    with pytest.raises(ClientTokensError) as refused:
        parse_clients(f"ops {digest(ALICE)}\n{line}\n", "tokens")

    assert f"tokens {expected}" in str(refused.value)


def test_a_line_may_name_a_policy_set_beside_its_grant_in_either_order() -> None:
    text = (f"ci {digest(ALICE)} policy:payments\n"
            f"release-bot {digest(BOB)} policy:payments publish:@team-a/*\n"
            f"ops {digest(ALICE + 'x')}\n"
            "payments-ci https://token.actions.githubusercontent.com repository=acme/pay-* "
            "publish:@pay/* policy:payments-strict\n")

    found = parse_tokens_file(text, "tokens")

    assert [(c.name, c.policy, c.publish.texts()) for c in found.clients] == [
        ("ci", "payments", []), ("release-bot", "payments", ["@team-a/*"]), ("ops", None, [])]
    assert (found.mappings[0].policy, found.mappings[0].publish.texts()) == (
        "payments-strict", ["@pay/*"])
    assert found.policies() == {"payments": ["ci", "release-bot"],
                                "payments-strict": ["payments-ci"]}


def test_a_line_naming_a_policy_set_the_rules_lack_is_refused_naming_both_files(
        tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"alice {digest(ALICE)} policy:payments\nbob {digest(BOB)}\n")
    defined = parse_rules('[policy.payments.age]\nminimum = "7d"\n', "/etc/rules.toml")
    failures: list[str] = []
    tokens = ClientTokens(path, on_reload_failed=failures.append,
                          check=lambda found: policy_problem(found, defined, str(path)))

    path.write_text(f"alice {digest(ALICE)} policy:paymnets\nbob {digest(BOB)}\n")
    assert tokens.refresh() is False

    assert tokens.match(ALICE).policy == "payments"  # type: ignore[union-attr]
    [failure] = failures
    assert f"the tokens file {path} names policy:paymnets (on the line of alice)" in failure
    assert "which the rules file /etc/rules.toml does not define (its policy sets: " \
        "payments)" in failure
    # at start the same is a refusal to start, and without a rules file too
    with pytest.raises(ClientTokensError, match="no rules file"):
        ClientTokens(path, check=lambda found: policy_problem(found, DEFAULT_RULES, str(path)))


def test_a_token_pasted_where_its_digest_belongs_is_not_echoed_in_the_error() -> None:
    with pytest.raises(ClientTokensError) as refused:
        parse_clients(f"ci sha256:{ALICE}\n", "tokens")

    assert ALICE not in str(refused.value)


def test_new_tokens_are_random_and_their_line_matches_them(tmp_path: Path) -> None:
    first, second = new_token(), new_token()
    path = tmp_path / "tokens"
    path.write_text(token_line("ci", first) + "\n")

    assert first != second
    assert len(first) >= 40
    assert ClientTokens(path).match(first) is not None
    assert ClientTokens(path).match(second) is None


def test_only_the_exact_token_matches_its_client(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"alice {digest(ALICE)}\nbob {digest(BOB)}\n")
    tokens = ClientTokens(path)

    assert tokens.match(ALICE) is not None
    assert tokens.match(ALICE).name == "alice"  # type: ignore[union-attr]
    assert tokens.match(BOB).name == "bob"  # type: ignore[union-attr]
    assert tokens.match(ALICE[:-1]) is None
    assert tokens.match(ALICE + "x") is None
    assert tokens.match(digest(ALICE)) is None  # the digest is not a token


def test_a_rewritten_file_takes_effect_on_the_next_refresh(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"alice {digest(ALICE)}\n")
    tokens = ClientTokens(path)

    path.write_text(f"bob {digest(BOB)}\n")

    assert tokens.refresh() is True
    assert tokens.match(ALICE) is None
    assert tokens.match(BOB) is not None


def test_a_bad_rewrite_keeps_the_last_good_set_and_reports_it_once(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"alice {digest(ALICE)}\n")
    failures: list[str] = []
    tokens = ClientTokens(path, on_reload_failed=failures.append)

    path.write_text(f"alice {digest(ALICE)}\nbob {digest(BOB)} everything\n")
    tokens.refresh()
    tokens.refresh()

    assert tokens.match(ALICE) is not None
    assert tokens.match(BOB) is None
    assert len(failures) == 1
    assert "line 2: unknown permission 'everything'" in failures[0]

    path.write_text(f"bob {digest(BOB)}\n")
    assert tokens.refresh() is True
    assert tokens.match(BOB) is not None


def test_a_deleted_file_keeps_the_last_good_set(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"alice {digest(ALICE)}\n")
    failures: list[str] = []
    tokens = ClientTokens(path, on_reload_failed=failures.append)

    path.unlink()

    assert tokens.refresh() is False
    assert tokens.refresh() is False
    assert tokens.match(ALICE) is not None
    assert len(failures) == 1


def test_a_kubernetes_secret_rotated_by_symlink_swap_is_seen(tmp_path: Path) -> None:
    # the kubelet's layout: key -> ..data/key, ..data -> ..<timestamp>; a rotation writes a new
    # timestamped directory and renames a new ..data link over the old one
    def version(stamp: str, text: str) -> None:
        folder = tmp_path / f"..{stamp}"
        folder.mkdir()
        (folder / "tokens").write_text(text)
        mtime = 1_700_000_000
        os.utime(folder / "tokens", (mtime, mtime))
        (tmp_path / "..data_tmp").symlink_to(folder.name)
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")

    # same length, same mtime: only the inode tells them apart
    version("2026_01", f"alice {digest(ALICE)}\n")
    (tmp_path / "tokens").symlink_to("..data/tokens")
    tokens = ClientTokens(tmp_path / "tokens")
    version("2026_02", f"alice {digest(BOB)}\n")

    assert tokens.refresh() is True
    assert tokens.match(ALICE) is None
    assert tokens.match(BOB) is not None


def test_an_unreadable_file_at_start_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClientTokensError, match="cannot read"):
        ClientTokens(tmp_path / "absent")


@pytest.mark.parametrize(("header", "token"), [
    (f"Bearer {ALICE}", ALICE),
    (f"bearer  {ALICE} ", ALICE),
    ("Basic " + base64.b64encode(f"anyone:{ALICE}".encode()).decode(), ALICE),
    ("Basic " + base64.b64encode(f":{ALICE}".encode()).decode(), ALICE),
    ("Basic " + base64.b64encode(b"anyone:").decode(), None),
    ("Basic " + base64.b64encode(ALICE.encode()).decode(), None),
    ("Basic !!!", None),
    ("Bearer", None),
    (f"Token {ALICE}", None),
    (None, None),
])
def test_a_token_is_read_from_bearer_or_from_basic_s_password(header: str | None,
                                                            token: str | None) -> None:
    assert presented_token(header) == token
