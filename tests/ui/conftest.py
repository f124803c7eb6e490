"""The browser suite's fixtures: Debian's Chromium, headless, driven by Playwright.

The browser is the distribution's package (`/usr/bin/chromium`, installed by scripts/test),
never a build Playwright downloads. Absent, the suite is a skip on a laptop and a failure in
CI. Screenshots go to `tests/artifacts/ui/` (ignored by git), one per test, for a person to
look at after a run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Dialog, Page, Playwright, sync_playwright

from tests.servers.availability import unavailable

CHROMIUM = os.environ.get("MIRRORGATE_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Playwright]:
    # module, not session: the sync driver keeps an event loop running in this thread while
    # it is open, and pytest-asyncio cannot start a test's loop beside it afterwards
    if shutil.which(CHROMIUM) is None:
        unavailable(f"Chromium is not at {CHROMIUM}: scripts/test installs Debian's chromium "
                    "package (apt-get install chromium)")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    launched = playwright_driver.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    yield launched
    launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh context (no cookies) per test; a JavaScript dialog fails the test, since the
    status page runs no script and an injected one must not run either."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    opened = context.new_page()
    dialogs: list[str] = []

    def refuse(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    opened.on("dialog", refuse)
    yield opened
    context.close()
    assert dialogs == [], f"a script ran and opened a dialog: {dialogs}"


