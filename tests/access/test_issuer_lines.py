"""Issuer lines of the tokens file: what they accept, what they refuse (by line), what they match.

The attacks: a line that would admit every repository a shared issuer signs for (GitHub's and
gitlab.com's issuers sign for everyone's jobs), a glob that reaches further than it reads
(`acme/*` taking `acme/team/x`), a condition on a claim mirrorgate checks itself, an issuer
over plain http on the network, and `check-config` printing what an operator needs without a
digest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirrorgate.access.claims import Identity
from mirrorgate.access.tokens import ClientTokens, ClientTokensError, parse_tokens_file
from tests.servers.processes import run_command

GITHUB = "https://token.actions.githubusercontent.com"
GITLAB = "https://gitlab.com"
DIGEST = "sha256:" + "0" * 64


def mapping_of(line: str) -> tuple[str, ...]:
    [mapping] = parse_tokens_file(line + "\n", "tokens").mappings
    return tuple(c.text for c in mapping.conditions)


def test_issuer_lines_sit_beside_static_clients_in_file_order_with_their_grants() -> None:
    text = (f"dashboard {DIGEST}\n"
            f"payments-ci {GITHUB} repository=acme/payments-* ref=refs/heads/main "
            "publish:@acme-payments/*\n"
            f"gitlab-ci {GITLAB} project_path=acme/** ref=main ref_protected=true\n")

    read = parse_tokens_file(text, "tokens")

    assert [c.name for c in read.clients] == ["dashboard"]
    assert [(m.name, m.issuer, m.publish.texts()) for m in read.mappings] == [
        ("payments-ci", GITHUB, ["@acme-payments/*"]), ("gitlab-ci", GITLAB, [])]
    assert read.issuers == (GITHUB, GITLAB)
    assert read.mappings[1].summary() == {
        "name": "gitlab-ci", "issuer": GITLAB,
        "claims": ["project_path=acme/**", "ref=main", "ref_protected=true"], "publish": [],
        "policy": None}


@pytest.mark.parametrize(("claims", "met"), [
    ({"repository": "acme/payments-api", "ref": "refs/heads/main"}, True),
    ({"repository": "acme/payments-api", "ref": "refs/heads/release"}, True),
    ({"repository": "acme/payments-api", "ref": "refs/heads/feature/x"}, False),  # `*` stays
    ({"repository": "acme/payments", "ref": "refs/heads/main"}, False),  # in one segment
    ({"repository": "evil/acme/payments-api", "ref": "refs/heads/main"}, False),  # whole value
    ({"repository": "acme/payments-api"}, False),
    ({"repository": ["acme/payments-api"], "ref": "refs/heads/main"}, False),  # not a string
])
def test_a_line_applies_when_every_claim_matches_one_of_its_globs_in_full(
    claims: dict[str, object], met: bool,
) -> None:
    [mapping] = parse_tokens_file(
        f"ci {GITHUB} repository=acme/payments-* ref=refs/heads/main,refs/heads/release\n",
        "tokens").mappings

    assert (mapping.unmet(claims) is None) is met


def test_a_double_star_crosses_gitlab_subgroups_and_booleans_compare_as_json() -> None:
    [mapping] = parse_tokens_file(f"ci {GITLAB} project_path=acme/** ref_protected=true\n",
                                  "tokens").mappings

    assert mapping.unmet({"project_path": "acme/team/app", "ref_protected": "true"}) is None
    assert mapping.unmet({"project_path": "acme/team/app", "ref_protected": True}) is None
    assert mapping.unmet({"project_path": "acme/team/app", "ref_protected": "false"}) is not None


@pytest.mark.parametrize(("line", "expected"), [
    # GitHub's issuer signs for every repository on GitHub: a line must narrow it down
    (f"ci {GITHUB}", "an issuer line needs at least one condition"),
    (f"ci {GITHUB} publish:@acme/*", "an issuer line needs at least one condition"),
    (f"ci {GITHUB} repository=**", "`repository=**` matches any value"),
    (f"ci {GITHUB} repository=*,**", "matches any value"),
    (f"ci {GITHUB} aud=mirrorgate", "`aud` is checked by mirrorgate itself"),
    (f"ci {GITHUB} exp=9999999999", "`exp` is checked by mirrorgate itself"),
    (f"ci {GITHUB} repository=acme/a repository=acme/b", "`repository` is named twice"),
    (f"ci {GITHUB} repository=", "`repository=` names no value"),
    (f"ci {GITHUB} =acme", "'=acme' is not a condition"),
    (f"ci {GITHUB} publish:@acme/* repository=acme/x", "the grant comes last"),
    (f"ci {GITHUB} repository=acme/x publish", "`publish` must name the packages"),
    ("ci http://ci.example.com repository=acme/x", "must be https://"),
    (f"ci {GITHUB}/ repository=acme/x", "ends with `/`"),
    ("ci https://user:pw@ci.example.com repository=acme/x", "no credentials"),
    (f"ci {DIGEST}\nci {GITHUB} repository=acme/x", "the client 'ci' is listed twice"),
])
def test_a_bad_issuer_line_is_refused_naming_its_number(line: str, expected: str) -> None:
    with pytest.raises(ClientTokensError) as refused:
        parse_tokens_file(f"# CI\n{line}\n", "tokens")

    assert "tokens line " in str(refused.value)
    assert expected in str(refused.value)


def test_plain_http_is_taken_for_a_loopback_issuer_only() -> None:
    assert mapping_of("ci http://127.0.0.1:8080 repository=acme/x") == ("repository=acme/x",)
    assert mapping_of("ci http://localhost:8080 repository=acme/x") == ("repository=acme/x",)


def test_an_identity_reads_github_and_gitlab_claims_alike() -> None:
    github = Identity.of(GITHUB, {"sub": "repo:acme/api:ref:refs/heads/main",
                                  "repository": "acme/api", "ref": "refs/heads/main"})
    gitlab = Identity.of(GITLAB, {"sub": "project_path:acme/team/app:ref_type:tag:ref:v1.2",
                                  "project_path": "acme/team/app", "ref": "v1.2",
                                  "ref_type": "tag"})

    assert github.describe() == "acme/api, branch main"
    assert gitlab.describe() == "acme/team/app, tag v1.2"
    assert gitlab.fields() == {"identity_issuer": GITLAB,
                               "identity_repository": "acme/team/app",
                               "identity_ref": "refs/tags/v1.2"}


def test_a_reload_that_adds_an_issuer_line_applies_to_the_next_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"dashboard {DIGEST}\n")
    tokens = ClientTokens(path)
    assert [m.name for m in tokens.mappings] == []

    path.write_text(f"dashboard {DIGEST}\nci {GITHUB} repository=acme/*\n")

    assert tokens.refresh() is True
    assert [m.name for m in tokens.mappings] == ["ci"]


def test_check_config_lists_the_issuers_and_their_lines_and_no_digest(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"dashboard {DIGEST}\n"
                      f"payments-ci {GITHUB} repository=acme/payments-* ref=refs/heads/main "
                      "publish:@acme-payments/*\n"
                      f"gitlab-ci {GITLAB} project_path=acme/**\n")

    env = {"PATH": "/usr/bin:/bin", "MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/",
           "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens), "MIRRORGATE_OIDC_AUDIENCE": "mg-prod"}
    summary = run_command("check-config", env=env)
    done = run_command("check-config", "--json", env=env)

    # on a terminal: the issuers and each line's conditions and grant, one line each
    assert summary.returncode == 0, summary.stderr
    assert f"for audience 'mg-prod' from {GITHUB}, {GITLAB}" in summary.stdout
    assert ("payments-ci: repository=acme/payments-* ref=refs/heads/main -> "
            "publish:@acme-payments/*") in summary.stdout
    assert "gitlab-ci: project_path=acme/** -> read" in summary.stdout
    assert "0" * 64 not in summary.stdout

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["clients"]
    assert report["issuers"] == [GITHUB, GITLAB]
    assert report["audience"] == "mg-prod"
    assert report["static"] == [{"name": "dashboard", "publish": [], "policy": None}]
    assert report["issuer_lines"][0] == {
        "name": "payments-ci", "issuer": GITHUB,
        "claims": ["repository=acme/payments-*", "ref=refs/heads/main"],
        "publish": ["@acme-payments/*"], "policy": None}
    assert "0" * 64 not in done.stdout


def test_check_config_shows_which_identities_get_which_policy_set(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"dashboard {DIGEST}\n"
                      f"payments-ci {GITHUB} repository=acme/payments-* policy:payments\n"
                      f"web-ci {GITHUB} repository=acme/web-*\n")
    rules = tmp_path / "rules.toml"
    rules.write_text('[policy.payments.age]\nminimum = "7d"\n[policy.trial]\nmode = "report"\n',
                     encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/",
           "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens), "MIRRORGATE_RULES_FILE": str(rules)}

    summary = run_command("check-config", env=env)
    done = run_command("check-config", "--json", env=env)

    assert summary.returncode == 0, summary.stderr
    assert "payments-ci: repository=acme/payments-* -> read (policy payments)" in summary.stdout
    assert "policy     payments: for payments-ci" in summary.stdout
    assert "- minimum-age: a version is held back until it is 7 days old" in summary.stdout
    assert "policy     trial: for no client yet" in summary.stdout
    assert "every other client: the default rules above" in summary.stdout
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["policies"]["payments"]["clients"] == ["payments-ci"]
    assert report["policies"]["payments"]["rules"]["age"]["minimum"] == "7 days"
    assert report["policies"]["trial"]["clients"] == []
    assert report["clients"]["issuer_lines"][0]["policy"] == "payments"

    # a line naming a policy set the rules file lacks: the configuration cannot be used
    tokens.write_text(f"payments-ci {GITHUB} repository=acme/payments-* policy:paymentz\n")
    refused = run_command("check-config", env=env)
    assert refused.returncode == 2
    assert "names policy:paymentz (on the line of payments-ci)" in refused.stderr
    assert f"the rules file {rules} does not define" in refused.stderr
