"""The status page in a real headless Chromium, served by the real `mirrorgate serve`.

What a person does: install through the proxy and read the counts on the overview; open a
package with a denied version and read why and what to use instead; use the search box; sign
in with a client token; follow a link whose package name carries markup and see it inert;
read who pulled a package, as a client (its own pulls) and as an operator (everyone's).
"""

from __future__ import annotations

import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.commands.mirrored import run_command
from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import make_package, make_version, standard_tree
from tests.servers.postgres_server import PostgresServer
from tests.servers.processes import MirrorgateProcess, http_request, wait_for
from tests.ui.screens import screenshot

TOKEN = "mgc_browser-token-7a2e91"  # noqa: S105 - a test token
RULES = '[deny]\npackages = ["delta@0.5.0", "zeta@1.0.0"]\n'


@pytest.fixture
def proxy(public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
          tmp_path: Path) -> MirrorgateProcess:
    tree = standard_tree()
    public_registry.add(*tree.packages)
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    # a one-second TTL: the package view shows a mirrored copy as soon as the worker made it
    return mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                "MIRRORGATE_RULES_FILE": str(rules),
                                "MIRRORGATE_CACHE_TTL": "1"})


def figure(page: Page, key: str) -> str:
    return page.locator(f'[data-key="{key}"]').inner_text()


def test_the_overview_shows_the_counts_of_a_real_npm_install(
    proxy: MirrorgateProcess, npm_client: NpmClient, page: Page,
) -> None:
    tree = standard_tree()
    npm_client.write_project(tree.dependencies)
    done = npm_client.install(registry=proxy.registry_url)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published")
             == len(tree.resolved), timeout=60)

    page.goto(proxy.url + "ui/")

    expect(page.locator("h1")).to_have_text("Status")
    published = len(tree.resolved)
    assert figure(page, "jobs-total-published") == str(published)
    assert figure(page, "jobs-hour-published") == str(published)
    assert figure(page, "jobs-enqueued") == str(int(proxy.metric("mirrorgate_jobs_enqueued_total")))
    assert figure(page, "jobs-dropped") == "0"
    assert figure(page, "versions-denied") == str(
        int(proxy.metric("mirrorgate_rule_denials_total", rule="deny-list")))
    denials = page.locator("section", has=page.locator("h2", has_text="Recent denials"))
    expect(denials).to_contain_text("delta@0.5.0")
    expect(denials).to_contain_text("zeta@1.0.0")
    expect(page.locator("table.rules.changed")).to_contain_text("delta@0.5.0")
    expect(page.get_by_text("kept in memory only")).to_be_visible()
    screenshot(page, "overview")


def test_a_denied_version_shows_its_rule_its_reason_and_the_nearest_admitted_one(
    proxy: MirrorgateProcess, page: Page,
) -> None:
    page.goto(proxy.url + "ui/package/delta")

    row = page.locator("table.versions tr", has=page.locator(".version", has_text="0.5.0"))
    expect(row.locator(".verdict")).to_have_text("denied (deny-list)")
    expect(row).to_contain_text("delta@0.5.0")
    expect(row).to_contain_text("nearest admitted: 0.4.2")
    admitted = page.locator("table.versions tr", has=page.locator(".version", has_text="0.4.2"))
    expect(admitted.locator(".verdict")).to_have_text("admitted")
    tags = page.locator("section", has=page.locator("h2", has_text="dist-tags"))
    expect(tags).to_contain_text("0.4.2")  # latest repointed past the denied 0.5.0
    expect(page.locator("section", has=page.locator("h2", has_text="Who pulled it"))) \
        .to_contain_text("no client pulled a version of this package")
    screenshot(page, "package")


def test_the_search_box_opens_a_scoped_package_and_shows_what_was_mirrored(
    proxy: MirrorgateProcess, npm_client: NpmClient, page: Page,
) -> None:
    npm_client.write_project({"@fixture/beta": "2.1.3"})
    assert npm_client.install(registry=proxy.registry_url).returncode == 0
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published") >= 1,
             timeout=60)
    page.goto(proxy.url + "ui/")

    page.fill("#name", "@fixture/beta")
    page.press("#name", "Enter")

    expect(page).to_have_url(re.compile(r"/ui/package/@fixture%2fbeta$"))
    expect(page.locator("h1")).to_have_text("@fixture/beta")
    verdict = page.locator("table.versions tr",
                           has=page.locator(".version", has_text="2.1.3")).locator(".verdict")
    expect(verdict).to_have_text(re.compile("admitted|mirrored"))

    def mirrored() -> bool:  # once the cache's one-second TTL lets the mirrored copy in
        page.reload()
        return verdict.inner_text() == "mirrored"

    wait_for(mirrored, timeout=15, interval=0.5)
    # who pulled it, from the pull log: npm's one pull, by no client name (tokens are off)
    pulled = page.locator("section", has=page.locator("h2", has_text="Who pulled it"))
    row = pulled.locator("tr", has=page.locator(".version", has_text="2.1.3"))
    expect(row).to_contain_text("anonymous")
    expect(row.locator("td").nth(4)).to_have_text("1")
    screenshot(page, "search")


def test_the_login_form_takes_a_client_token_and_refuses_a_wrong_one(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory, tmp_path: Path,
    page: Page,
) -> None:
    tokens = tmp_path / "client-tokens"
    tokens.write_text(f"ops sha256:{hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_CLIENT_TOKENS_FILE": str(tokens)})

    page.goto(proxy.url + "ui/")
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    page.fill("#token", TOKEN + "-wrong")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_contain_text("does not know this client token")
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")

    expect(page).to_have_url(re.compile(r"/ui/$"))
    expect(page.locator("h1")).to_have_text("Status")
    cookies = page.context.cookies()
    assert [c["name"] for c in cookies] == ["mirrorgate_ui"]
    assert cookies[0]["httpOnly"] is True
    assert cookies[0]["sameSite"] == "Strict"
    assert TOKEN not in cookies[0]["value"]
    assert TOKEN not in proxy.running.output()
    assert "ui_login_refused" in proxy.running.output()
    screenshot(page, "login")


def test_a_hostile_name_in_the_url_is_rendered_as_inert_text(
    proxy: MirrorgateProcess, page: Page, public_registry: FixtureRegistry,
) -> None:
    public_registry.clear_requests()
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text))

    page.goto(proxy.url + "ui/package/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E")

    expect(page.locator("h1")).to_have_text("Not a package name")
    expect(page.locator(".error")).to_contain_text("<img src=x onerror=alert(1)>")
    assert page.locator("main img").count() == 0
    page.fill("#name", "<script>alert(2)</script>")
    page.press("#name", "Enter")
    expect(page.locator(".error")).to_contain_text("<script>alert(2)</script>")
    assert page.locator("main script").count() == 0
    assert public_registry.requests == []
    assert [v for v in violations if "Content Security Policy" in v] == []
    screenshot(page, "hostile-name")


def sign_in(page: Page, proxy: MirrorgateProcess, token: str) -> None:
    page.goto(proxy.url + "ui/")
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/ui/$"))


def test_a_client_reads_only_its_own_pulls_and_an_operator_reads_every_clients(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory, tmp_path: Path,
    page: Page, browser: Browser,
) -> None:
    """The attack: any client's token read on the status page which other clients (a CI
    job's repository and branch) pulled which versions, when and how often. Now that is an
    operator's view (MIRRORGATE_OPERATORS); a client reads its own pulls."""
    tokens = {"ops": TOKEN, "web-ci": TOKEN + "-web", "api-ci": TOKEN + "-api"}
    listed = tmp_path / "client-tokens"
    listed.write_text("".join(f"{name} sha256:{hashlib.sha256(value.encode()).hexdigest()}\n"
                              for name, value in tokens.items()))
    public_registry.add(make_package("shared-pkg", ["1.0.0", "1.1.0"]))
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_CLIENT_TOKENS_FILE": str(listed),
                                 "MIRRORGATE_OPERATORS": "ops"})
    for client, version in (("web-ci", "1.0.0"), ("api-ci", "1.1.0")):
        pulled = http_request("GET", proxy.registry_url
                              + f"shared-pkg/-/shared-pkg-{version}.tgz",
                              headers={"Authorization": f"Bearer {tokens[client]}"})
        assert pulled.status == 200

    sign_in(page, proxy, tokens["web-ci"])
    recent = page.locator("section", has_text="Recent pulls by signed-in clients")
    expect(recent.locator('[data-key="pulls-own"]')).to_contain_text("as web-ci")
    expect(recent.locator("td")).to_contain_text(["shared-pkg/-/shared-pkg-1.0.0.tgz"])
    wait_for(lambda: page.goto(proxy.url + "ui/package/shared-pkg") is not None
             and "web-ci" in page.locator("table.pulled").inner_text(), timeout=10,
             message="web-ci's pull in the pull log")
    rows = page.locator("table.pulled tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td").nth(1)).to_have_text("web-ci")
    assert "api-ci" not in page.content()  # nor anywhere else on the page
    page.goto(proxy.url + "ui/")
    assert "api-ci" not in page.content()
    screenshot(page, "pulls-own")

    operator = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    sign_in(operator, proxy, tokens["ops"])
    operator.goto(proxy.url + "ui/package/shared-pkg")
    clients = operator.locator("table.pulled tbody tr td:nth-child(2)")
    expect(clients).to_have_text(["api-ci", "web-ci"])  # newest version first
    expect(operator.locator('[data-key="pulls-own"]')).to_have_count(0)
    operator.goto(proxy.url + "ui/")
    recent = operator.locator("section", has_text="Recent pulls by signed-in clients")
    expect(recent.locator("td", has_text="by ")).to_have_text(["by api-ci", "by web-ci"])
    screenshot(operator, "pulls-operator")
    operator.context.close()


def test_the_stored_counts_are_the_fleets_from_the_state_store(
    public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
    postgres_server: PostgresServer, tmp_path: Path, page: Page,
) -> None:
    """The page said "not stored yet: each process keeps its own" for refused and quarantined
    versions while the store held every refusal. Two replicas on one PostgreSQL: what one
    refused, and a waiver granted with `mirrorgate allow`, are counted on the other's page."""
    young = make_version("fresh-lib", "2.0.0", published=datetime.now(UTC))
    public_registry.add(make_package("fresh-lib", [make_version("fresh-lib", "1.0.0"), young]),
                        make_package("delta", ["0.5.0", "0.6.0"]))
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    # on a thread of its own: Playwright's driver holds an event loop running on this one
    with ThreadPoolExecutor(1) as aside:
        database = aside.submit(postgres_server.new_database_now).result()
    env = {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url, "MIRRORGATE_RULES_FILE": str(rules),
           "MIRRORGATE_DATABASE_URL": database}
    one, other = (mirrorgate("serve", {**env, "MIRRORGATE_DATA_DIR": str(tmp_path / f"d{n}")})
                  for n in range(2))
    for path in ("delta/-/delta-0.5.0.tgz", "fresh-lib/-/fresh-lib-2.0.0.tgz"):
        for _ in range(3):  # a client retrying: still one version each
            assert http_request("GET", one.registry_url + path).status == 403
    # the bytes named by hand: this command reaches no registry (`allow --integrity`)
    granted = run_command(["allow", "left-pad@1.3.1", "--why", "the fix", "--until",
                           "2099-01-01", "--by", "alice",
                           "--integrity", "sha512-" + "A" * 86 + "=="],
                          {"MIRRORGATE_DATABASE_URL": database}, tmp_path)
    assert granted.returncode == 0, granted.stderr

    def counted() -> bool:
        page.goto(other.url + "ui/")
        return [figure(page, key) for key in ("stored-refused", "stored-quarantined",
                                              "stored-waived")] == ["1", "1", "1"]
    wait_for(counted, timeout=20, message="the other replica's page to count the fleet's")
    expect(page.locator("#stored-refused .note")).to_contain_text(
        "the state store (postgresql, every replica's)")
    assert "not stored yet" not in page.content()
    screenshot(page, "stored-fleet")
