"""The status page an on-call engineer reads in five seconds, in a real headless Chromium after
a real npm install through the real `mirrorgate serve`.

What the report found and this holds: one verdict at the top (healthy, or degraded with its
reasons); the versions the store holds, not only what this process did since it started;
durations in seconds, never a variable's name; one word per concept ("mirrored" for a job,
"published" for a client's publish); no rule name broken across lines; the rules that differ
from the defaults first and the rest folded. Each test writes a screenshot to
`tests/artifacts/ui/`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.servers.fixture_registry import FixtureRegistry
from tests.servers.fixtures import MirrorgateFactory
from tests.servers.npm import NpmClient
from tests.servers.packages import standard_tree
from tests.servers.ports import free_port
from tests.servers.processes import MirrorgateProcess, wait_for
from tests.ui.screens import screenshot

RULES = ('[deny]\npackages = ["delta@0.5.0", "zeta@1.0.0"]\n'
         '[install_scripts]\nallow = ["esbuild"]\n')


@pytest.fixture
def installed(public_registry: FixtureRegistry, mirrorgate: MirrorgateFactory,
              npm_client: NpmClient, tmp_path: Path) -> MirrorgateProcess:
    """A real install of the standard tree, every version mirrored into the file store."""
    tree = standard_tree()
    public_registry.add(*tree.packages)
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": public_registry.url,
                                 "MIRRORGATE_RULES_FILE": str(rules)})
    npm_client.write_project(tree.dependencies)
    done = npm_client.install(registry=proxy.registry_url)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: proxy.metric("mirrorgate_jobs_total", outcome="published")
             == len(tree.resolved), timeout=60)
    return proxy


def text_of(page: Page, key: str) -> str:
    return page.locator(f'[data-key="{key}"]').inner_text()


def test_after_an_install_the_page_says_healthy_and_counts_what_the_store_holds(
    installed: MirrorgateProcess, page: Page, mirrorgate: MirrorgateFactory,
) -> None:
    mirrored = len(standard_tree().resolved)

    page.goto(installed.url + "ui/")

    # the verdict is the first thing under the heading
    first = page.locator("main > section").first
    expect(first).to_have_class("health healthy")
    expect(first.locator('[data-key="verdict"]')).to_have_text("Healthy")
    assert text_of(page, "stored-mirrored") == str(mirrored)
    assert text_of(page, "jobs-total-published") == str(mirrored)
    assert text_of(page, "registry-url") == installed.registry_url
    # durations in seconds, no variable name where a duration belongs
    body = page.locator("main").inner_text()
    assert "MIRRORGATE_HEARTBEAT_STALE_AFTER" not in body
    expect(page.locator("#heartbeat-age .note")).to_have_text("stale after 120 s")
    assert text_of(page, "heartbeat-age").endswith(" s")
    # one word per concept: a mirror job "mirrored", a client's publish "published"
    jobs = page.locator("section", has=page.locator("h2", has_text="Mirror jobs by outcome"))
    expect(jobs.locator("tbody tr td").first).to_have_text("mirrored")
    assert "published" not in jobs.inner_text()
    # the rules: in force one line each, what differs from the defaults, the rest folded
    in_force = page.locator('[data-key="rules-in-force"] li')
    # integrity, deny list, install scripts, cooldown, a capability gained, a young package's
    # capabilities, an unreadable release
    expect(in_force).to_have_count(7)
    expect(in_force.nth(1)).to_contain_text("deny-list: delta@0.5.0, zeta@1.0.0")
    changed = page.locator("table.rules.changed tbody tr")
    expect(changed).to_have_count(3)  # deny.packages, install_scripts block and allow
    folded = page.locator("details", has=page.locator("table.rules.defaults"))
    expect(folded.locator("table")).to_be_hidden()
    screenshot(page, "five-seconds-healthy")  # as a person first sees it: the defaults folded
    folded.locator("summary").click()
    expect(folded.locator("table")).to_be_visible()
    # no rule or setting name broken across lines ("integri/ty"): each fits on one line
    lines = page.locator("table.rules td:nth-child(-n+2)").evaluate_all(
        "cells => cells.map(cell => { const range = document.createRange();"
        " range.selectNodeContents(cell);"
        " return [cell.textContent, new Set([...range.getClientRects()].map(r => r.top)).size]; })")
    assert len(lines) > 30
    assert [(name, count) for name, count in lines if count > 1] == []

    # the same store read by a fresh process: the counts survive a restart
    assert installed.terminate() == 0
    again = mirrorgate("serve", {**{k: v for k, v in installed.env.items()
                                    if k.startswith("MIRRORGATE_")}})
    page.goto(again.url + "ui/")
    assert text_of(page, "stored-mirrored") == str(mirrored)
    assert text_of(page, "jobs-enqueued") == "0"


def test_with_the_public_upstream_down_the_page_says_degraded_and_why(
    mirrorgate: MirrorgateFactory, npm_client: NpmClient, page: Page,
) -> None:
    proxy = mirrorgate("serve", {"MIRRORGATE_PUBLIC_UPSTREAM": f"http://127.0.0.1:{free_port()}/"})
    npm_client.write_project({"left-pad": "1.3.0"})
    assert npm_client.install(registry=proxy.registry_url).returncode != 0

    page.goto(proxy.url + "ui/")

    health = page.locator("main > section").first
    expect(health).to_have_class("health degraded")
    expect(health.locator('[data-key="verdict"]')).to_have_text("Degraded")
    reasons = health.locator('[data-key="verdict-reasons"] li')
    expect(reasons).to_have_count(1)
    expect(reasons.first).to_contain_text("the public upstream failed")
    expect(reasons.first).to_contain_text(" s ago: ")
    screenshot(page, "five-seconds-degraded")
