"""Playwright driving Debian's Chromium against pytest-django's live server.

Never `playwright install`: it downloads a browser, which this project's machines cannot.
Screenshots of every page kind are written to var/test-artifacts/screenshots/.
"""

import os
import shutil
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread; Django refuses ORM calls from a
# thread with a running loop unless told that this is deliberate (tests only).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("EVALSTUDY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: apt-get install chromium "
                    "(or set EVALSTUDY_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def new_page(browser):
    """Factory for pages in fresh contexts (a context is one browser profile: own cookies)."""
    contexts = []

    def make(width=1100, height=900, javascript=True):
        context = browser.new_context(viewport={"width": width, "height": height},
                                      java_script_enabled=javascript)
        context.set_default_timeout(10_000)
        contexts.append(context)
        page = context.new_page()
        page.on("dialog", lambda dialog: pytest.fail(f"unexpected dialog: {dialog.message}"))
        return page

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def shot():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def take(page, name):
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    return take
