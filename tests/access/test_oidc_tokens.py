"""CI jobs sign in with their OpenID Connect ID token: the real npm client, the real `mirrorgate
serve`, Verdaccio behind it, and an issuer on loopback that signs its own tokens.

The attacks these stop: a repository publishing another team's scope with its own job's token;
a token for another service (wrong audience), from another issuer, expired, unsigned (`alg:
none`), HS256-keyed with the issuer's public key, or signed by a key the issuer never published;
and an issuer that cannot be reached turning into either an open door or a stalled proxy. No
ID token ever reaches a log line or a metric (every one is handed to the guard).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from mirrorgate.access.oidc import REFRESH_FLOOR
from mirrorgate.access.tokens import new_token, token_line
from tests.access.issuer import AUDIENCE, LoopbackIssuer, forged_hs256, unsigned
from tests.access.rig import SecretDir, auth_npmrc, start_guarded
from tests.faults.guarded import GuardedFactory, SecretGuard
from tests.publish.stack import npm_package
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.npm import NpmClient
from tests.servers.packages import standard_tree
from tests.servers.processes import MirrorgateProcess, Reply, http_request, wait_for
from tests.servers.verdaccio import Verdaccio

RULES = '[publish]\nnames = ["@acme-payments/*", "@acme-web/*"]\n'
PAYMENTS = "acme/payments-api"
WEB = "acme/web-app"


def tokens_text(issuer: LoopbackIssuer, reader: str) -> str:
    """A static reader beside two issuer lines: the payments repositories' main branch
    publishes the payments scope; the web repositories' main branch reads."""
    return (f"{token_line('dashboard', reader)}\n"
            f"payments-ci {issuer.issuer} repository=acme/payments-* ref=refs/heads/main "
            "publish:@acme-payments/*\n"
            f"web-ci {issuer.issuer} repository=acme/web-* ref=refs/heads/main\n")


def start(guarded: GuardedFactory, guard: SecretGuard, public: FixtureRegistry,
          verdaccio: Verdaccio, secrets: SecretDir, tmp_path: Path, issuer: LoopbackIssuer,
          reader: str, **env: str) -> MirrorgateProcess:
    secrets.write(tokens_text(issuer, reader))
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    return start_guarded(guarded, guard, public, verdaccio, secrets.path, reader,
                         MIRRORGATE_RULES_FILE=str(rules), MIRRORGATE_OIDC_AUDIENCE=AUDIENCE,
                         **env)


def whoami(proxy: MirrorgateProcess, token: str, timeout: float = 10.0) -> Reply:
    return http_request("GET", proxy.registry_url + "-/whoami",
                        headers={"Authorization": f"Bearer {token}"}, timeout=timeout)


def with_token(npm: NpmClient, proxy: MirrorgateProcess, token: str) -> None:
    """The job's npmrc: its ID token as `_authToken`, for the proxy alone (a fresh file)."""
    npm.userconfig.write_text("fetch-retries=0\nloglevel=warn\nfund=false\naudit=false\n"
                              "update-notifier=false\n", encoding="utf-8")
    auth_npmrc(npm, proxy.registry_url, token=token)


def test_the_payments_job_installs_and_publishes_its_scope_and_the_web_job_is_refused(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
    issuer: LoopbackIssuer,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    reader = new_token()
    # the static reader is the operator: it reads every job's pulls on the status page
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path, issuer,
                  reader, MIRRORGATE_OPERATORS="dashboard")
    payments, web = issuer.mint(PAYMENTS), issuer.mint(WEB)
    for token in (payments, web):
        guard.watch(proxy, token)

    with_token(npm_client, proxy, payments)
    npm_client.write_project(tree.dependencies)
    installed = npm_client.install(registry=proxy.registry_url)
    published = npm_client.run("publish", registry=proxy.registry_url,
                               cwd=npm_package(tmp_path / "pkg", "@acme-payments/ledger",
                                               "1.0.0"))
    with_token(npm_client, proxy, web)
    web_publish = npm_client.run("publish", registry=proxy.registry_url,
                                 cwd=npm_package(tmp_path / "pkg", "@acme-payments/ledger",
                                                 "1.0.1"))
    npm_client.clear_cache()  # npm publish left the tarball in the cache
    web_install = npm_client.install("@acme-payments/ledger", registry=proxy.registry_url)
    for run in (installed, published, web_publish, web_install):
        guard.seen(run.stdout + run.stderr, "npm's output")

    assert installed.returncode == 0, installed.stderr
    assert published.returncode == 0, published.stderr
    assert web_publish.returncode != 0
    assert "E403" in web_publish.stderr
    assert "web-ci may not publish" in web_publish.stderr
    assert web_install.returncode == 0, web_install.stderr  # web-ci reads
    assert verdaccio.versions("@acme-payments/ledger") == ["1.0.0"]
    [line] = proxy.events("package_published")
    assert (line["client"], line["identity_repository"], line["identity_ref"]) == (
        "payments-ci", PAYMENTS, "refs/heads/main")
    wait_for(lambda: proxy.events("tarball_served"), message="tarballs")
    served = proxy.events("tarball_served")
    assert {(s["client"], s["identity_repository"]) for s in served} >= {("payments-ci",
                                                                          PAYMENTS)}
    [refused] = proxy.events("publish_refused")
    assert (refused["client"], refused["identity_repository"]) == ("web-ci", WEB)
    page = proxy.get("ui/", headers={"Authorization": f"Bearer {reader}"}).body.decode()
    assert "@acme-payments/ledger@1.0.0" in page
    assert "by payments-ci (acme/payments-api, branch main)" in page  # the publish
    assert "alpha/-/alpha-1.2.0.tgz" in page  # a pull, by the same identity
    assert "by web-ci (acme/web-app, branch main)" in page  # the web job's pull
    assert whoami(proxy, payments).json() == {"username": "payments-ci"}


def test_a_token_from_another_branch_matches_no_line_and_the_refusal_names_the_claim(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
    issuer: LoopbackIssuer,
) -> None:
    public_registry.add(*standard_tree().packages)
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path, issuer,
                  new_token())
    feature = issuer.mint(PAYMENTS, "refs/heads/feature/speedup")
    guard.watch(proxy, feature)

    with_token(npm_client, proxy, feature)
    npm_client.write_project(standard_tree().dependencies)
    done = npm_client.install(registry=proxy.registry_url)
    reply = whoami(proxy, feature)
    guard.seen(done.stdout + done.stderr, "npm's output")
    guard.seen(reply)

    assert done.returncode != 0
    assert "E403" in done.stderr
    assert reply.status == 403
    message = reply.json()["error"]
    assert "acme/payments-api, branch feature/speedup" in message
    assert ("`payments-ci` needs ref=refs/heads/main (the token's ref is "
            '"refs/heads/feature/speedup")') in message
    assert "`web-ci` needs repository=acme/web-*" in message
    assert npm_client.installed() == {}
    assert public_registry.requests == []


def test_forged_expired_and_misdirected_tokens_are_each_refused_with_a_clear_message(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
    issuer: LoopbackIssuer,
) -> None:
    public_registry.add(*standard_tree().packages)
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path, issuer,
                  new_token())
    now = int(time.time())
    with LoopbackIssuer() as other:
        tokens = {
            "expired": issuer.mint(PAYMENTS, iat=now - 1800, nbf=now - 1800, exp=now - 600),
            "wrong audience": issuer.mint(PAYMENTS, aud="sts.amazonaws.com"),
            "unknown issuer": other.mint(PAYMENTS),
            # another issuer's key, claiming to be ours (same `kid`, as key-1 is a common name)
            "bad signature": other.mint(PAYMENTS, iss=issuer.issuer),
            "alg none": unsigned(issuer.claims(PAYMENTS), issuer.key.kid),
            "hs256 with the public key": forged_hs256(issuer.claims(PAYMENTS), issuer.key),
            "unknown key": issuer.mint(PAYMENTS, kid="key-from-nowhere"),
        }
    expected = {
        "expired": ("expired", "the ID token expired at"),
        "wrong audience": ("wrong audience", "the ID token is for the audience "
                           "'sts.amazonaws.com'; this mirrorgate takes tokens for "
                           f"'{AUDIENCE}'"),
        "unknown issuer": ("unknown issuer", f"issuer '{other.issuer}' is not one this "
                           "mirrorgate trusts"),
        "bad signature": ("bad signature", "signature does not verify"),
        "alg none": ("algorithm not allowed", "signed with 'none'"),
        "hs256 with the public key": ("algorithm not allowed", "signed with 'HS256'"),
        "unknown key": ("unknown key", "names key 'key-from-nowhere', which "
                        f"{issuer.issuer} does not publish"),
    }
    npm_client.write_project(standard_tree().dependencies)
    for case, token in tokens.items():
        guard.watch(proxy, token)
        with_token(npm_client, proxy, token)
        done = npm_client.install(registry=proxy.registry_url)
        guard.seen(done.stdout + done.stderr, f"npm's output ({case})")
        reply = whoami(proxy, token)
        guard.seen(reply)
        reason, sentence = expected[case]
        assert done.returncode != 0, case
        assert "E401" in done.stderr, (case, done.stderr)
        assert reply.status == 401, case
        assert reply.json()["reason"] == reason, case
        assert sentence in reply.json()["error"], (case, reply.json())

    assert npm_client.installed() == {}
    assert public_registry.requests == []
    refusals = {line["reason"] for line in proxy.events("client_refused")}
    assert refusals == {reason for reason, _ in expected.values()}
    expired = [line for line in proxy.events("client_refused") if line["reason"] == "expired"]
    assert proxy.metric("mirrorgate_refusals_total", reason="oidc_expired") == len(expired)
    assert all("the ID token expired at" in line["detail"] for line in expired)
    # the first fetch, and at most one more for the made-up `kid`'s requests (npm's and
    # whoami's): a refresh costs the issuer one fetch however many tokens ask for it
    unknown = [line for line in proxy.events("client_refused") if line["reason"] == "unknown key"]
    assert len(unknown) >= 2
    assert 1 <= issuer.requests.count("/.well-known/jwks") <= 2


def test_a_rotated_issuer_key_is_fetched_on_its_first_token_and_the_old_key_stops_working(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
    issuer: LoopbackIssuer,
) -> None:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path, issuer,
                  new_token())
    before = issuer.mint(PAYMENTS)
    assert whoami(proxy, before).status == 200

    issuer.rotate()
    after = issuer.mint(PAYMENTS)
    for token in (before, after):
        guard.watch(proxy, token)
    rotated = time.monotonic()
    wait_for(lambda: whoami(proxy, after).status == 200, timeout=REFRESH_FLOOR + 5,
             message="the new key to be fetched")
    with_token(npm_client, proxy, after)
    npm_client.write_project(tree.dependencies)
    installed = npm_client.install(registry=proxy.registry_url)
    old = whoami(proxy, before)

    assert time.monotonic() - rotated < REFRESH_FLOOR + 5
    assert installed.returncode == 0, installed.stderr
    assert npm_client.installed() == tree.resolved
    assert old.status == 401
    assert old.json()["reason"] == "unknown key"
    assert [line["keys"] for line in proxy.events("oidc_keys_fetched")] == [1, 1]


def test_an_unreachable_issuer_fails_its_tokens_closed_and_static_tokens_are_not_stalled(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, npm_client: NpmClient, secret_dir: SecretDir, tmp_path: Path,
    issuer: LoopbackIssuer,
) -> None:
    timeout = 4.0
    tree = standard_tree()
    public_registry.add(*tree.packages)
    reader = new_token()
    issuer.stall = True  # the discovery document never comes
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path, issuer,
                  reader, MIRRORGATE_OIDC_TIMEOUT=str(timeout))
    job = issuer.mint(PAYMENTS)
    guard.watch(proxy, job)
    answers: list[tuple[Reply, float]] = []

    def sign_in() -> None:
        started = time.monotonic()
        answers.append((whoami(proxy, job, timeout=30), time.monotonic() - started))

    waiting = threading.Thread(target=sign_in)
    waiting.start()
    wait_for(lambda: issuer.requests or None, message="the proxy to ask the issuer")
    started = time.monotonic()
    static = whoami(proxy, reader)
    static_seconds = time.monotonic() - started
    still_waiting = waiting.is_alive()
    auth_npmrc(npm_client, proxy.registry_url, token=reader)
    npm_client.write_project(tree.dependencies)
    installed = npm_client.install(registry=proxy.registry_url)
    waiting.join(timeout=30)
    [(refused, refused_seconds)] = answers
    started = time.monotonic()
    again = whoami(proxy, job)
    again_seconds = time.monotonic() - started
    guard.seen(refused)

    assert static.status == 200
    assert still_waiting, "the static token was answered after the ID token, not beside it"
    assert static_seconds < 1.0
    assert installed.returncode == 0, installed.stderr
    assert npm_client.installed() == tree.resolved
    assert refused.status == 503
    assert refused.headers.get("Retry-After") == "10"
    assert refused.json()["reason"] == "issuer keys unavailable"
    assert f"no answer within {timeout:g} s (MIRRORGATE_OIDC_TIMEOUT)" in refused.json()["error"]
    assert timeout - 0.5 < refused_seconds < timeout + 3
    # within REFRESH_FLOOR of the failure the next token is refused at once, not waited on
    assert again.status == 503
    assert again_seconds < 1.0
    assert issuer.requests == ["/.well-known/openid-configuration"]

    issuer.stall = False
    wait_for(lambda: whoami(proxy, job).status == 200, timeout=REFRESH_FLOOR + 5,
             message="the issuer's keys once it answers again")


def test_a_ci_job_reads_its_own_pulls_on_the_status_page_and_is_never_an_operator(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path, issuer: LoopbackIssuer,
) -> None:
    """The attack: one repository's job reading on the status page which other repositories
    and branches pulled what. Each job sees its own identity's pulls; listing the issuer
    line's name in MIRRORGATE_OPERATORS makes no job an operator (the line admits every job
    its conditions match), while the static `dashboard` it names reads everyone's."""
    tree = standard_tree()
    public_registry.add(*tree.packages)
    reader = new_token()
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path, issuer,
                  reader, MIRRORGATE_OPERATORS="web-ci,dashboard")
    app, site = issuer.mint("acme/web-app"), issuer.mint("acme/web-site")
    for token in (app, site):
        guard.watch(proxy, token)
    name = tree.packages[0].name
    version = next(iter(tree.packages[0].versions))
    tarball = f"{proxy.registry_url}{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"
    for token in (app, site):
        assert http_request("GET", tarball, headers={"Authorization": f"Bearer {token}"}
                            ).status == 200

    def page(token: str) -> str:
        reply = http_request("GET", f"{proxy.url}ui/package/{name.replace('/', '%2f')}",
                             headers={"Authorization": f"Bearer {token}"})
        assert reply.status == 200
        return reply.body.decode().split("Who pulled it", 1)[1]

    def both() -> str:
        shown = page(reader)
        return shown if "acme/web-site" in shown and "acme/web-app" in shown else ""

    everyone = wait_for(both, timeout=10, message="both jobs' pulls in the pull log")
    assert "Your pulls only" not in everyone
    own = page(app)
    assert "web-ci (acme/web-app, branch main)" in own
    assert "acme/web-site" not in own
    assert "Your pulls only" in own
    assert "acme/web-app" not in page(site)


def test_a_hung_issuer_with_its_keys_cached_answers_a_new_key_503_with_retry_after(
    guarded: GuardedFactory, guard: SecretGuard, public_registry: FixtureRegistry,
    verdaccio: Verdaccio, secret_dir: SecretDir, tmp_path: Path, issuer: LoopbackIssuer,
) -> None:
    """The fault: the issuer rotates its key and then hangs while mirrorgate holds the old key
    set. A token signed with the new key cannot be checked: it answered 401 "unknown key"
    after the timeout (npm stops, as for a forged token), where docs/ci-identity.md promises
    503 with Retry-After (npm retries). The old key's tokens go on working meanwhile."""
    timeout = 2.0
    public_registry.add(*standard_tree().packages)
    proxy = start(guarded, guard, public_registry, verdaccio, secret_dir, tmp_path, issuer,
                  new_token(), MIRRORGATE_OIDC_TIMEOUT=str(timeout))
    before = issuer.mint(PAYMENTS)
    assert whoami(proxy, before).status == 200  # the key set fetched and cached
    fetched = time.monotonic()
    issuer.rotate()
    after = issuer.mint(PAYMENTS)
    for token in (before, after):
        guard.watch(proxy, token)
    issuer.stall = True
    # past the refresh floor, so the new key's token makes mirrorgate ask the issuer again
    time.sleep(max(0.0, REFRESH_FLOOR + 0.5 - (time.monotonic() - fetched)))
    try:
        started = time.monotonic()
        refused = whoami(proxy, after, timeout=30)
        waited = time.monotonic() - started
        again = whoami(proxy, after)  # within the refresh floor: at once, the same answer
        cached = whoami(proxy, before)
    finally:
        issuer.stall = False
    guard.seen(refused)

    assert refused.status == 503
    assert refused.headers.get("Retry-After") == "10"
    assert refused.json()["reason"] == "issuer keys unavailable"
    assert f"no answer within {timeout:g} s" in str(refused.json()["error"])
    assert timeout - 0.5 < waited < timeout + 3
    assert (again.status, again.json()["reason"]) == (503, "issuer keys unavailable")
    assert cached.status == 200
    wait_for(lambda: whoami(proxy, after).status == 200, timeout=REFRESH_FLOOR + 5,
             message="the new key once the issuer answers again")
