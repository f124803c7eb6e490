"""A policy set per team: two CI identities through the real npm client, the real `mirrorgate
serve`, Verdaccio behind it and the loopback OIDC issuer, each judged by its own rules.

The payments repositories' line names `policy:payments`, whose `[policy.payments.age]` holds
a version back 7 days; the web repositories' line names none (the default's day). The attacks
these stop: a packument or a version one team's policy admits reaching a team whose policy
refuses it, through the packument cache, its warm path and memo, a revalidation (`ETag`) or
the tarball route; and a rewrite of either file leaving a client judged by rules nobody wrote.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from mirrorgate.access.tokens import new_token, token_line
from tests.access.issuer import AUDIENCE, LoopbackIssuer
from tests.access.rig import SecretDir, auth_npmrc, start_guarded
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version
from tests.servers.processes import MirrorgateProcess, Reply, http_request, wait_for
from tests.servers.verdaccio import Verdaccio

RULES = '[policy.payments.age]\nminimum = "7d"\n'
PAYMENTS = "acme/payments-api"
WEB = "acme/web-app"
NAME = "ledger-math"
FULL = "application/json"
ABBREVIATED = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"
RELOAD_WITHIN = 2.0


def tokens_text(issuer: LoopbackIssuer, reader: str, payments_policy: str = "payments") -> str:
    return (f"{token_line('dashboard', reader)}\n"
            f"payments-ci {issuer.issuer} repository=acme/payments-* "
            f"policy:{payments_policy}\n"
            f"web-ci {issuer.issuer} repository=acme/web-*\n")


def ledger() -> list[object]:
    now = datetime.now(UTC)
    return [make_package(NAME, [
        make_version(NAME, "1.0.0", published=now - timedelta(days=30)),
        make_version(NAME, "1.1.0", published=now - timedelta(days=3))])]


def start(guarded: GuardedFactory, guard: SecretGuard, public: FixtureRegistry,
          verdaccio: Verdaccio, secrets: SecretDir, rules: Path, issuer: LoopbackIssuer,
          reader: str) -> MirrorgateProcess:
    public.add(*ledger())  # type: ignore[arg-type]
    secrets.write(tokens_text(issuer, reader))
    rules.write_text(RULES, encoding="utf-8")
    return start_guarded(guarded, guard, public, verdaccio, secrets.path, reader,
                         MIRRORGATE_RULES_FILE=str(rules), MIRRORGATE_OIDC_AUDIENCE=AUDIENCE)


def minted(proxy: MirrorgateProcess, guard: SecretGuard, issuer: LoopbackIssuer,
           *repositories: str) -> list[str]:
    """An ID token for each repository's job, each handed to the guard."""
    tokens = [issuer.mint(repository) for repository in repositories]
    for token in tokens:
        guard.watch(proxy, token)
    return tokens


def job(tmp_path: Path, proxy: MirrorgateProcess, token: str, name: str) -> NpmClient:
    """A CI job's npm: a workspace, cache and npmrc of its own, its ID token for the proxy."""
    npm = NpmClient(tmp_path / name, registry=proxy.registry_url)
    auth_npmrc(npm, proxy.registry_url, token=token)
    return npm


def packument(proxy: MirrorgateProcess, token: str, accept: str = FULL,
              etag: str | None = None) -> Reply:
    headers = {"Authorization": f"Bearer {token}", "Accept": accept}
    if etag is not None:
        headers["If-None-Match"] = etag
    return http_request("GET", proxy.registry_url + NAME, headers=headers)


def listed(reply: Reply) -> list[str]:
    assert reply.status == 200, reply.body[:300]
    return sorted(reply.json()["versions"])


def test_the_job_under_a_7_day_cooldown_is_refused_a_3_day_old_version_the_other_installs(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path, issuer: LoopbackIssuer,
) -> None:
    reader = new_token()
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir,
                  tmp_path / "rules.toml", issuer, reader)
    payments_token, web_token = minted(proxy, guard, issuer, PAYMENTS, WEB)
    web = job(tmp_path, proxy, web_token, "web")
    payments = job(tmp_path, proxy, payments_token, "payments")

    # the web job first: its install fills (and warms) the packument under the default rules
    web.write_project({NAME: "^1.0.0"})
    web_install = web.install()
    payments.write_project({NAME: "^1.0.0"})
    payments_range = payments.install()
    pinned = job(tmp_path, proxy, payments_token, "payments-pinned")
    pinned.write_project({NAME: "1.1.0"})
    payments_pinned = pinned.install()
    for run in (web_install, payments_range, payments_pinned):
        guard.seen(run.stdout + run.stderr, "npm's output")

    assert web_install.returncode == 0, web_install.stderr
    assert web.installed() == {NAME: "1.1.0"}
    assert payments_range.returncode == 0, payments_range.stderr
    assert payments.installed() == {NAME: "1.0.0"}  # the range resolved past the young one
    assert payments_pinned.returncode != 0
    assert "E403" in payments_pinned.stderr
    assert "minimum-age" in payments_pinned.stderr or "7 days" in payments_pinned.stderr
    assert pinned.installed() == {}

    # the packument each sees lists what its policy admits, and the refused version is in
    # npm's policyRestrictions with the reason, for the payments job only
    web_doc = packument(proxy, web_token).json()
    payments_doc = packument(proxy, payments_token).json()
    assert sorted(web_doc["versions"]) == ["1.0.0", "1.1.0"]
    assert web_doc["dist-tags"]["latest"] == "1.1.0"
    assert "policyRestrictions" not in web_doc
    assert sorted(payments_doc["versions"]) == ["1.0.0"]
    assert payments_doc["dist-tags"]["latest"] == "1.0.0"
    assert "1.1.0" in payments_doc["policyRestrictions"]["versions"]
    assert "7 days" in payments_doc["policyRestrictions"]["message"]

    # the tarball route refuses by the asking client's policy, wherever the packument came from
    tarball = f"{NAME}/-/{NAME}-1.1.0.tgz"
    refused = http_request("GET", proxy.registry_url + tarball,
                           headers={"Authorization": f"Bearer {payments_token}"})
    served = http_request("GET", proxy.registry_url + tarball,
                          headers={"Authorization": f"Bearer {web_token}"})
    assert refused.status == 403
    assert refused.json()["rule"] == "minimum-age"
    assert served.status == 200


def test_a_packument_cached_for_one_policy_is_never_served_to_the_other(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path, issuer: LoopbackIssuer,
) -> None:
    reader = new_token()
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir,
                  tmp_path / "rules.toml", issuer, reader)
    payments_token, web_token = minted(proxy, guard, issuer, PAYMENTS, WEB)

    # the same path and headers each time (the warm memo's key), alternating identities: every
    # answer after the first two is a warm hit, and each is its own policy's
    hits_before = proxy.metric("mirrorgate_cache_total", result="hit")
    answers = [(who, packument(proxy, token, ABBREVIATED))
               for _round in range(5)
               for who, token in (("web", web_token), ("payments", payments_token))]
    hits = proxy.metric("mirrorgate_cache_total", result="hit") - hits_before
    for who, reply in answers:
        assert listed(reply) == (["1.0.0", "1.1.0"] if who == "web" else ["1.0.0"]), who
    assert hits >= 8  # the warm path answered them, not a fill each
    # the control: the default rules (the reader's static token names no policy) see both
    assert listed(packument(proxy, reader, ABBREVIATED)) == ["1.0.0", "1.1.0"]

    # a revalidation with the other team's ETag is no shortcut to its packument
    web_etag = answers[0][1].headers["ETag"]
    payments_etag = answers[1][1].headers["ETag"]
    assert web_etag != payments_etag
    crossed = packument(proxy, payments_token, ABBREVIATED, etag=web_etag)
    assert crossed.status == 200
    assert listed(crossed) == ["1.0.0"]
    assert packument(proxy, web_token, ABBREVIATED, etag=web_etag).status == 304  # control
    assert packument(proxy, payments_token, ABBREVIATED, etag=payments_etag).status == 304

    # the version document and dist-tags answer by the same policy
    version = http_request("GET", proxy.registry_url + f"{NAME}/1.1.0",
                           headers={"Authorization": f"Bearer {payments_token}"})
    tags = http_request("GET", proxy.registry_url + f"-/package/{NAME}/dist-tags",
                        headers={"Authorization": f"Bearer {payments_token}"})
    assert version.status == 403
    assert tags.json()["latest"] == "1.0.0"

    # the status page says which identities get which policy set
    page = proxy.get("ui/", headers={"Authorization": f"Bearer {reader}"}).body.decode()
    assert 'data-key="policy-payments"' in page
    assert 'data-key="policy-clients-payments">payments-ci</span>' in page
    assert "held back until it is 7 days old" in page


def test_a_reload_applies_a_policy_change_within_seconds_and_never_strands_a_client(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path, issuer: LoopbackIssuer,
) -> None:
    reader = new_token()
    rules = tmp_path / "rules.toml"
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir, rules, issuer, reader)
    payments_token = issuer.mint(PAYMENTS)
    guard.watch(proxy, payments_token)
    assert listed(packument(proxy, payments_token)) == ["1.0.0"]

    # the rules file drops the policy set a tokens-file line still names: refused, naming both
    rules.write_text('[age]\nminimum = "1d"\n', encoding="utf-8")
    wait_for(lambda: proxy.events("rules_reload_failed"), timeout=RELOAD_WITHIN + 1)
    [failed] = proxy.events("rules_reload_failed")
    problem = " ".join(failed["problems"])
    assert "policy:payments" in problem
    assert str(secret_dir.path) in problem
    assert str(rules) in problem
    assert listed(packument(proxy, payments_token)) == ["1.0.0"]  # the last good rules

    # a shorter cooldown for the team: in force within seconds, no restart
    rules.write_text('[policy.payments.age]\nminimum = "2d"\n', encoding="utf-8")
    started = datetime.now(UTC)
    wait_for(lambda: listed(packument(proxy, payments_token)) == ["1.0.0", "1.1.0"],
             timeout=RELOAD_WITHIN + 1, message="the 2-day cooldown in force")
    assert (datetime.now(UTC) - started).total_seconds() < RELOAD_WITHIN + 1

    # the tokens file names a policy set the rules lack: refused, the last good file in force
    secret_dir.write(tokens_text(issuer, reader, payments_policy="payment"))
    wait_for(lambda: proxy.events("client_tokens_reload_failed"), timeout=12,
             message="the tokens file's rewrite refused")
    [refused] = proxy.events("client_tokens_reload_failed")
    assert "policy:payment " in refused["reason"]
    assert str(rules) in refused["reason"]
    assert "payments-ci" in refused["reason"]
    assert listed(packument(proxy, payments_token)) == ["1.0.0", "1.1.0"]
    assert proxy.metric("mirrorgate_client_tokens_reload_failures_total") == 1
    assert proxy.metric("mirrorgate_rules_reload_failures_total") == 1


def test_a_version_only_a_laxer_policy_admits_is_served_but_never_sent_to_the_worker(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path, issuer: LoopbackIssuer,
) -> None:
    """The worker re-gates every job with the default rules: a job for a version only a laxer
    set admits would be refused there as a forged job (a security line and a notification)
    at every pull. The proxy sends none; the version is served from public to that set."""
    now = datetime.now(UTC)
    public_registry.add(make_package("quick-fix", [
        make_version("quick-fix", "2.0.0", published=now - timedelta(days=40)),
        make_version("quick-fix", "2.0.1", published=now - timedelta(hours=3))]))
    reader = new_token()
    rules = tmp_path / "rules.toml"
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir, rules, issuer, reader)
    rules.write_text(RULES + '[policy.prototype.age]\nminimum = "0"\n', encoding="utf-8")
    secret_dir.write(tokens_text(issuer, reader)
                     + f"proto-ci {issuer.issuer} repository=acme/proto-* policy:prototype\n")
    wait_for(lambda: proxy.events("client_tokens_reloaded"), timeout=12)
    proto_token, web_token = minted(proxy, guard, issuer, "acme/proto-app", WEB)

    proto = job(tmp_path, proxy, proto_token, "proto")
    proto.write_project({"quick-fix": "2.0.1"})
    lax = proto.install()
    web = job(tmp_path, proxy, web_token, "web")
    web.write_project({"quick-fix": "^2.0.0"})
    default = web.install()
    for run in (lax, default):
        guard.seen(run.stdout + run.stderr, "npm's output")

    assert lax.returncode == 0, lax.stderr
    assert proto.installed() == {"quick-fix": "2.0.1"}
    assert default.returncode == 0, default.stderr
    assert web.installed() == {"quick-fix": "2.0.0"}  # the control: the default's day holds
    wait_for(lambda: verdaccio.versions("quick-fix") == ["2.0.0"], timeout=20,
             message="the default's pull mirrored")
    [skipped] = proxy.events("job_not_enqueued")
    assert (skipped["package"], skipped["version"]) == ("quick-fix", "2.0.1")
    assert "pulled under a policy set" in skipped["reason"]
    assert proxy.events("mirror_job_refused") == []  # no forged-job alarm
    assert proxy.metric("mirrorgate_jobs_total", outcome="retired") == 0
