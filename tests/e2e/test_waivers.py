"""Waivers: a version the rules refuse, admitted by an operator's `mirrorgate allow` (the real
command) on every mirrorgate sharing the state store within a second, and refused again when the
waiver is revoked or ends (docs/serving.md#waivers-mirrorgate-allow).

The case is the one a cooldown makes every week: a security fix published an hour ago, held by
an 8-day minimum age, needed today. The attack a waiver must not open: a waiver outliving its
end or its revoke, admitting a version after the operator took the exception back.
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest

from mirrorgate.access.tokens import token_line
from mirrorgate.moments import stamp
from mirrorgate.store import Fact
from mirrorgate.store.sqlite import open_sqlite
from mirrorgate.store.waivers import WAIVER
from tests.commands.mirrored import run_command
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version
from tests.servers.postgres_server import PostgresServer
from tests.servers.processes import MirrorgateProcess, http_request, mirrorgate_argv, wait_for
from tests.servers.webhook import SECRET, WebhookReceiver

EIGHT_DAYS = '[age]\nminimum = "8d"\n'
BYTES = "sha512-" + "A" * 86 + "=="
TARBALL = "npm/fixed-lib/-/fixed-lib-1.0.1.tgz"


def publish_fix(public: FixtureRegistry) -> None:
    now = datetime.now(UTC)
    public.add(make_package("fixed-lib", [
        make_version("fixed-lib", "1.0.0", published=now - timedelta(days=90)),
        make_version("fixed-lib", "1.0.1", published=now - timedelta(hours=1))]))


def rules_file(tmp_path: Path) -> str:
    path = tmp_path / "rules.toml"
    path.write_text(EIGHT_DAYS, encoding="utf-8")
    return str(path)


def allow(tmp_path: Path, store: dict[str, str], *args: str) -> str:
    done = run_command(["allow", *args], {**store, "USER": "alice"}, tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout


def served(proxy: MirrorgateProcess) -> int:
    return proxy.get(TARBALL).status


def within_a_second(proxies: list[MirrorgateProcess], status: int) -> None:
    said = time.monotonic()
    for proxy in proxies:
        wait_for(lambda proxy=proxy: served(proxy) == status,  # type: ignore[misc]
                 timeout=max(0.0, said + 1.0 - time.monotonic()),
                 message=f"the tarball answering {status} within a second")


def test_npm_installs_a_refused_fix_once_allowed_and_is_refused_again_after_the_revoke(
        public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
        npm_client: NpmClient, tmp_path: Path) -> None:
    publish_fix(public_registry)
    # the proxy's and the command's (which looks up the bytes it names, as the proxy lists them)
    store = {"MIRRORGATE_DATA_DIR": str(tmp_path / "state"),
             "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url}
    proxy = mirrorgate("serve", {**store, "MIRRORGATE_RULES_FILE": rules_file(tmp_path)})
    npm_client.write_project({})
    refused = npm_client.install("fixed-lib@1.0.1", registry=proxy.registry_url)
    assert refused.returncode != 0
    assert "fixed-lib@VERSION --why ... --until DATE" in refused.stdout + refused.stderr

    told = allow(tmp_path, store, "fixed-lib@1.0.1", "--why", "the fix for CVE-2026-1234",
                 "--until", stamp(datetime.now(UTC) + timedelta(days=7)))
    integrity = public_registry.package("fixed-lib").version("1.0.1").integrity
    assert f"fixed-lib@1.0.1 ({integrity}) admitted until" in told
    within_a_second([proxy], 200)
    npm_client.clear_cache()
    installed = npm_client.install("fixed-lib@1.0.1", registry=proxy.registry_url)
    assert installed.returncode == 0, installed.stderr
    assert npm_client.installed()["fixed-lib"] == "1.0.1"
    page = proxy.get("ui/").body.decode()  # the status page lists it, and whose it is
    assert '<span data-key="waiver">mirrorgate allow</span>' in page
    assert "the fix for CVE-2026-1234" in page
    listed = allow(tmp_path, store, "--list")
    assert "fixed-lib@1.0.1" in listed
    assert "alice: the fix for CVE-2026-1234" in listed
    assert f"bytes: {integrity}" in listed

    allow(tmp_path, store, "--revoke", "fixed-lib@1.0.1")
    within_a_second([proxy], 403)
    assert 'data-key="waiver"' not in proxy.get("ui/").body.decode()
    npm_client.clear_cache()
    again = npm_client.install("fixed-lib@1.0.1", registry=proxy.registry_url)
    assert again.returncode != 0
    assert "npm error code E403" in again.stdout + again.stderr
    assert "1.0.1" not in proxy.get("npm/fixed-lib").json()["versions"]


def test_an_ended_waiver_admits_nothing(
        public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
        tmp_path: Path) -> None:
    publish_fix(public_registry)
    store = {"MIRRORGATE_DATA_DIR": str(tmp_path / "state"),
             "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url}
    proxy = mirrorgate("serve", {**store, "MIRRORGATE_RULES_FILE": rules_file(tmp_path)})
    assert served(proxy) == 403
    ends = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
    allow(tmp_path, store, "fixed-lib@1.0.1", "--why", "a demo", "--until", stamp(ends))
    within_a_second([proxy], 200)
    assert "1.0.1" in proxy.get("npm/fixed-lib").json()["versions"]

    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()))
    within_a_second([proxy], 403)
    assert "1.0.1" not in proxy.get("npm/fixed-lib").json()["versions"]
    assert "(ended)" in allow(tmp_path, store, "--list")


def test_a_waiver_is_honoured_by_every_replica_on_one_postgresql_within_a_second(
        public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
        postgres_server: PostgresServer, tmp_path: Path) -> None:
    publish_fix(public_registry)
    store = {"MIRRORGATE_DATABASE_URL": postgres_server.new_database_now()}
    replicas = [mirrorgate("serve", {**store, "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                     "MIRRORGATE_RULES_FILE": rules_file(tmp_path),
                                     "MIRRORGATE_DATA_DIR": str(tmp_path / name)})
                for name in ("one", "two")]
    assert [served(proxy) for proxy in replicas] == [403, 403]

    allow(tmp_path, {**store, "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url},
          "fixed-lib@1.0.1", "--why", "the fix", "--until", "2099-01-01")
    within_a_second(replicas, 200)
    allow(tmp_path, store, "--revoke", "fixed-lib@1.0.1")
    within_a_second(replicas, 403)


def test_check_config_lists_the_waivers_in_force_for_a_person_and_in_json(
        tmp_path: Path) -> None:
    store = {"MIRRORGATE_DATA_DIR": str(tmp_path / "state"),
             "MIRRORGATE_PUBLIC_UPSTREAM": "http://127.0.0.1:9/"}
    before = run_command(["check-config"], store, tmp_path)
    assert "waivers    unknown (the state store is not read" in before.stdout  # not created
    # the bytes named by hand (no registry answers here): as a lockfile shows them
    allow(tmp_path, store, "left-pad@1.3.1", "--why", "the fix", "--until", "2099-01-01",
          "--by", "bob", "--integrity", f"{BYTES} sha1-AAAAAAAAAAAAAAAAAAAAAAAAAAA=")

    human = run_command(["check-config"], store, tmp_path)
    document = json.loads(run_command(["check-config", "--json"], store, tmp_path).stdout)

    assert (f"waivers    left-pad@1.3.1 until 2099-01-01T00:00:00Z (bob: the fix), bytes {BYTES}"
            in human.stdout.splitlines())
    [waiver] = document["store"]["waivers"]
    assert waiver | {"granted": "-"} == {"package": "left-pad@1.3.1", "by": "bob",
                                         "why": "the fix", "until": "2099-01-01T00:00:00Z",
                                         "granted": "-", "active": True, "integrity": BYTES}


def test_input_that_makes_no_waiver_exits_2_saying_what_is_wrong_with_an_example(
        tmp_path: Path) -> None:
    store = {"MIRRORGATE_DATA_DIR": str(tmp_path / "state"), "USER": "alice"}
    cases = {
        ("left-pad", "--until", "2099-01-01"): "'left-pad' names no version",
        ("left-pad@^1.3.0", "--until", "2099-01-01"): "'^1.3.0' is not an exact version",
        ("Left Pad@1.3.1", "--until", "2099-01-01"): "'Left Pad' is not a name npm accepts",
        ("left-pad@1.3.1", "--until", "2020-01-01"): "--until 2020-01-01T00:00:00Z is in the "
                                                     "past",
        ("left-pad@1.3.1", "--until", "next friday"): "--until 'next friday' is not a date",
        # an offset that overflows the calendar, a year past it: a sentence, no traceback
        ("left-pad@1.3.1", "--until", "9999-12-31T23:59:59-23:59"):
            "is past the ends of the calendar once its zone's offset is applied",
        ("left-pad@1.3.1", "--until", "9999-12-31"): "is outside the times mirrorgate reads",
        ("left-pad@1.3.1", "--until", "2099-01-01", "--integrity", "md5-AAAA"):
            "--integrity 'md5-AAAA' is not an SRI digest mirrorgate can verify",
    }
    for args, says in cases.items():
        done = run_command(["allow", args[0], "--why", "x", *args[1:]], store, tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert "for example: mirrorgate allow left-pad@1.3.1 --why" in done.stderr
    nothing = run_command(["allow", "--revoke", "left-pad@1.3.1"], store, tmp_path)
    assert nothing.returncode == 1
    assert "no waiver for left-pad@1.3.1" in nothing.stderr
    assert "no waivers" in run_command(["allow", "--list"], store, tmp_path).stdout


def test_a_grant_and_a_revoke_reach_the_webhook_signed_and_are_logged(
        webhook: WebhookReceiver, tmp_path: Path) -> None:
    store = {"MIRRORGATE_DATA_DIR": str(tmp_path / "state"),
             "MIRRORGATE_NOTIFY_URL": webhook.hook_url, "MIRRORGATE_NOTIFY_SECRET": SECRET,
             "USER": "alice"}
    granted = run_command(["allow", "fixed-lib@1.0.1", "--why", "the fix", "--until",
                           "2099-01-01", "--integrity", BYTES], store, tmp_path)
    revoked = run_command(["allow", "--revoke", "fixed-lib@1.0.1", "--by", "carol"], store,
                          tmp_path)

    assert (granted.returncode, revoked.returncode) == (0, 0)
    [grant] = webhook.of_type("dev.mirrorgate.waiver-granted")
    [revoke] = webhook.of_type("dev.mirrorgate.waiver-revoked")
    assert grant.signature_valid
    assert revoke.signature_valid
    assert grant.event["subject"] == "fixed-lib@1.0.1"
    assert grant.event["data"] | {"granted": "-", "host": "-"} == {
        "kind": "waiver-granted", "package": "fixed-lib", "version": "1.0.1",
        "process": "allow", "host": "-", "by": "alice", "why": "the fix",
        "until": "2099-01-01T00:00:00Z", "granted": "-", "integrity": BYTES}
    assert revoke.event["data"]["by"] == "carol"
    assert revoke.event["data"]["granted_by"] == "alice"
    logged = [json.loads(line) for line in (granted.stderr + revoked.stderr).splitlines()
              if line.startswith("{")]
    assert [line["event"] for line in logged] == ["waiver_granted", "waiver_revoked"]


# --- from the status page, behind its login ------------------------------------------------

OPS, CI = "ops-token-" + "a" * 32, "ci-token-" + "b" * 32


def tokens_file(tmp_path: Path) -> str:
    path = tmp_path / "client-tokens"
    path.write_text(f"{token_line('ops', OPS)}\n{token_line('ci', CI)}\n", encoding="utf-8")
    return str(path)


def posted(proxy: MirrorgateProcess, path: str, fields: dict[str, str],
           headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    """A form's POST as a browser sends it; the answer itself, its redirect not followed."""
    parts = urlsplit(proxy.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("POST", "/" + path, body=urlencode(fields).encode(), headers={
            **headers, "Content-Type": "application/x-www-form-urlencoded"})
        answer = connection.getresponse()
        answer.read()
        return answer.status, dict(answer.getheaders())
    finally:
        connection.close()


def signed_in(proxy: MirrorgateProcess, token: str) -> str:
    """The session cookie a browser gets from the login form."""
    form = http_request("GET", proxy.url + "ui/login")
    hidden = re.search(r'name="form" value="([^"]+)"', form.body.decode())
    assert hidden is not None
    status, headers = posted(proxy, "ui/login", {"token": token, "form": hidden.group(1)},
                             {"Cookie": form.headers["Set-Cookie"].split(";")[0]})
    assert status == 303
    return headers["Set-Cookie"].split(";")[0]


def post_form(proxy: MirrorgateProcess, path: str, cookie: str, fields: dict[str, str],
              origin: str | None = None) -> int:
    headers = {"Cookie": cookie}
    if origin is not None:
        headers["Origin"] = origin
    return posted(proxy, path, fields, headers)[0]


def form_token(proxy: MirrorgateProcess, cookie: str) -> str:
    page = http_request("GET", proxy.url + "ui/", headers={"Cookie": cookie}).body.decode()
    found = re.search(r'action="/ui/waivers/grant"[^>]*><input type="hidden" name="form" '
                      r'value="([^"]+)"', page)
    assert found is not None, page[page.find("Exceptions and"):][:1500]
    return found.group(1)


def test_a_waiver_granted_on_one_replica_s_status_page_is_honoured_by_the_other(
        public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
        postgres_server: PostgresServer, tmp_path: Path) -> None:
    publish_fix(public_registry)
    shared = {"MIRRORGATE_DATABASE_URL": postgres_server.new_database_now(),
              "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
              "MIRRORGATE_RULES_FILE": rules_file(tmp_path),
              "MIRRORGATE_CLIENT_TOKENS_FILE": tokens_file(tmp_path),
              "MIRRORGATE_WAIVER_GRANTERS": "ops"}
    one, other = [mirrorgate("serve", {**shared, "MIRRORGATE_DATA_DIR": str(tmp_path / name)})
                  for name in ("one", "two")]

    def status(proxy: MirrorgateProcess) -> int:
        return proxy.get(TARBALL, headers={"Authorization": f"Bearer {OPS}"}).status

    assert (status(one), status(other)) == (403, 403)
    ops = signed_in(one, OPS)
    token = form_token(one, ops)
    fields = {"form": token, "package": "fixed-lib@1.0.1", "why": "the fix",
              "until": "2099-01-01"}

    # the attacks first: another site's page posting with the person's cookie (its Origin, or
    # no form token), and a client that may sign in but not grant (a CI job's token)
    assert post_form(one, "ui/waivers/grant", ops, fields, origin="https://evil.example") == 403
    assert post_form(one, "ui/waivers/grant", ops, {**fields, "form": "guess"}) == 403
    ci = signed_in(one, CI)
    assert post_form(one, "ui/waivers/grant", ci, {**fields, "form": token}) == 403
    assert "fixed-lib@1.0.1" not in run_command(
        ["allow", "--list"], {"MIRRORGATE_DATABASE_URL": shared["MIRRORGATE_DATABASE_URL"]},
        tmp_path).stdout
    assert (status(one), status(other)) == (403, 403)

    assert post_form(one, "ui/waivers/grant", ops, fields, origin=one.url.rstrip("/")) == 303
    said = time.monotonic()
    wait_for(lambda: status(other) == 200, timeout=1.0, message="the other replica admitting it")
    assert time.monotonic() - said < 1.0
    assert status(one) == 200
    granted = [e for e in one.events("waiver_granted") if e.get("via") == "status page"]
    assert granted[0]["by"] == "ops"

    assert post_form(one, "ui/waivers/revoke", ops,
                     {"form": form_token(one, ops), "package": "fixed-lib@1.0.1"}) == 303
    wait_for(lambda: status(other) == 403, timeout=1.0, message="the other replica refusing it")
    assert status(one) == 403


def test_check_judges_a_locked_version_with_the_waivers_as_the_proxy_does(
        public_registry: FixtureRegistry, npm_client: NpmClient, tmp_path: Path) -> None:
    publish_fix(public_registry)
    npm_client.write_project({"fixed-lib": "1.0.1"})
    assert npm_client.install(registry=public_registry.url).returncode == 0
    lockfile = str(npm_client.project / "package-lock.json")
    store = {"MIRRORGATE_DATA_DIR": str(tmp_path / "state"),
             "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
             "MIRRORGATE_RULES_FILE": rules_file(tmp_path)}

    refused = run_command(["check", lockfile], store, tmp_path)
    allow(tmp_path, store, "fixed-lib@1.0.1", "--why", "the fix", "--until", "2099-01-01")
    admitted = run_command(["check", "--json", lockfile], store, tmp_path)

    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "minimum-age" in refused.stdout
    assert admitted.returncode == 0, admitted.stdout + admitted.stderr
    assert "the waiver for fixed-lib@1.0.1" in admitted.stdout


def test_a_grant_without_user_names_the_account_and_one_with_no_name_at_all_is_refused(
        tmp_path: Path) -> None:
    # where USER is unset (a `kubectl exec` shell, a container's entrypoint) the account
    # running the command grants; an account the system has no name for (a container run as
    # an arbitrary uid) grants nothing: a waiver granted by nobody could not be answered for
    state = tmp_path / "state"
    store = {"MIRRORGATE_DATA_DIR": str(state)}  # no USER, no LOGNAME
    done = run_command(["allow", "left-pad@1.3.1", "--why", "the fix", "--until", "2099-01-01",
                        "--integrity", BYTES, "--json"], store, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["by"] == pwd.getpwuid(os.getuid()).pw_name

    empty = run_command(["allow", "left-pad@1.3.2", "--why", "x", "--until", "2099-01-01",
                         "--integrity", BYTES, "--json"], {**store, "USER": ""},
                        tmp_path)  # set, empty: no name
    assert empty.returncode == 0, empty.stderr
    assert json.loads(empty.stdout)["by"] == pwd.getpwuid(os.getuid()).pw_name
    # the nameless account: a user namespace mapping this process's uid to one the system
    # has no name for (util-linux's unshare, as root: CI runs as root), so the same files and
    # interpreter stay readable, as in a container run with `runAsUser: 54321`
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a uid with no name needs root and util-linux's unshare (CI has both)")
    nameless = next(uid for uid in range(54_321, 60_000) if not _named(uid))
    as_nameless = ["unshare", "--user", f"--map-user={nameless}", f"--map-group={nameless}"]
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path),
           "MIRRORGATE_DATA_DIR": str(state), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    grant = [*mirrorgate_argv(), "allow", "left-pad@1.3.3", "--why", "x", "--until",
             "2099-01-01", "--integrity", BYTES]
    anonymous = subprocess.run([*as_nameless, *grant], env=env, capture_output=True, text=True,
                               timeout=60, check=False)
    assert anonymous.returncode == 2, anonymous.stderr
    assert (f"USER is not set and this account (uid {nameless}) has no name on this system; "
            "give --by NAME") in anonymous.stderr
    assert "--by alice" in anonymous.stderr  # the example shows it
    with_by = subprocess.run([*as_nameless, *grant, "--by", "ops-oncall", "--json"], env=env,
                             capture_output=True, text=True, timeout=60, check=False)
    assert with_by.returncode == 0, with_by.stderr
    assert json.loads(with_by.stdout)["by"] == "ops-oncall"


def _named(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


# --- a waiver admits exactly what it names (issue 53) ------------------------------------------


def test_a_waiver_admits_the_exact_version_it_names_not_its_build_metadata_sibling(
        public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
        npm_client: NpmClient, tmp_path: Path) -> None:
    # the attack: beside the refused fix 1.0.0, the publisher lists 1.0.0+evil with `latest`
    # on it. A range ignores build metadata, so a waiver matched as `wv@1.0.0` covered both,
    # and npm installs the tagged one for ^1.0.0
    now = datetime.now(UTC)
    public_registry.add(make_package("wv", [
        make_version("wv", "0.9.0", published=now - timedelta(days=90)),
        make_version("wv", "1.0.0", published=now - timedelta(hours=2)),
        make_version("wv", "1.0.0+evil", published=now - timedelta(hours=1),
                     scripts={"postinstall": "node -e \"require('child_process')\""})],
        dist_tags={"latest": "1.0.0+evil"}))
    store = {"MIRRORGATE_DATA_DIR": str(tmp_path / "state"),
             "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url}
    proxy = mirrorgate("serve", {**store, "MIRRORGATE_RULES_FILE": rules_file(tmp_path)})
    evil = "npm/wv/-/wv-1.0.0+evil.tgz"
    assert (proxy.get("npm/wv/-/wv-1.0.0.tgz").status, proxy.get(evil).status) == (403, 403)

    allow(tmp_path, store, "wv@1.0.0", "--why", "the fix", "--until", "2099-01-01")
    wait_for(lambda: proxy.get("npm/wv/-/wv-1.0.0.tgz").status == 200, timeout=2.0,
             message="the waiver admitting wv@1.0.0")

    assert proxy.get(evil).status == 403  # the sibling the waiver does not name
    packument = proxy.get("npm/wv").json()
    assert sorted(packument["versions"]) == ["0.9.0", "1.0.0"]
    assert packument["dist-tags"]["latest"] == "1.0.0"
    npm_client.write_project({"wv": "^1.0.0"})
    installed = npm_client.install(registry=proxy.registry_url)
    assert installed.returncode == 0, installed.stderr
    assert npm_client.installed()["wv"] == "1.0.0"  # the control: the version it names


def test_other_bytes_published_later_as_the_waived_version_are_not_waived(
        public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
        npm_client: NpmClient, tmp_path: Path) -> None:
    # the attack: the registry lists the waived version again with other bytes (a new
    # dist.integrity). The waiver names the bytes the operator was shown; not these.
    publish_fix(public_registry)
    original = public_registry.package("fixed-lib")
    store = {"MIRRORGATE_DATA_DIR": str(tmp_path / "state"),
             "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url}
    # every packument revalidated at once, so the republish reaches the next pull
    proxy = mirrorgate("serve", {**store, "MIRRORGATE_RULES_FILE": rules_file(tmp_path),
                                 "MIRRORGATE_CACHE_TTL": "0"})
    told = allow(tmp_path, store, "fixed-lib@1.0.1", "--why", "the fix", "--until",
                 "2099-01-01")
    assert original.version("1.0.1").integrity in told
    within_a_second([proxy], 200)

    fixed = original.version("1.0.1")
    public_registry.add(make_package("fixed-lib", [
        original.version("1.0.0"),
        make_version("fixed-lib", "1.0.1", published=fixed.published,
                     files={"index.js": b"require('child_process').exec('id');\n"})]))
    assert served(proxy) == 403
    npm_client.write_project({})
    refused = npm_client.install("fixed-lib@1.0.1", registry=proxy.registry_url)
    assert refused.returncode != 0
    assert "E403" in refused.stdout + refused.stderr
    assert "minimum-age" in refused.stdout + refused.stderr

    public_registry.add(original)  # the control: the bytes it names, listed again
    assert served(proxy) == 200
    npm_client.clear_cache()
    installed = npm_client.install("fixed-lib@1.0.1", registry=proxy.registry_url)
    assert installed.returncode == 0, installed.stderr


async def test_a_waiver_kept_before_waivers_named_their_bytes_admits_nothing_until_granted_again(
        public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
        tmp_path: Path) -> None:
    # a waiver an earlier release wrote (no integrity) cannot say which bytes were looked at:
    # it admits nothing, says so where waivers are listed and logged, and a grant names them
    publish_fix(public_registry)
    state = tmp_path / "state"
    store = {"MIRRORGATE_DATA_DIR": str(state), "MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url}
    kept = await open_sqlite(state / "state.sqlite3")
    await kept.put_facts([Fact(WAIVER, "fixed-lib@1.0.1", json.dumps({
        "by": "alice", "why": "the fix", "until": "2099-01-01T00:00:00Z",
        "granted": "2026-01-01T00:00:00Z"}))])
    await kept.close()
    proxy = mirrorgate("serve", {**store, "MIRRORGATE_RULES_FILE": rules_file(tmp_path)})

    assert served(proxy) == 403
    [unbound] = proxy.events("waivers_unbound")
    assert unbound["waivers"] == ["fixed-lib@1.0.1"]
    listed = allow(tmp_path, store, "--list")
    assert "fixed-lib@1.0.1" in listed
    assert "it admits nothing; grant it again" in listed
    assert "it names no bytes" in proxy.get("ui/").body.decode()

    allow(tmp_path, store, "fixed-lib@1.0.1", "--why", "the fix", "--until", "2099-01-01")
    within_a_second([proxy], 200)  # the control: the same waiver, naming the bytes
