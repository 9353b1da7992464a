"""Real Chromium (Debian's, never a downloaded build) driven by Playwright against `manage.py serve`."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..servers import ROOT, ServedApp

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Quiet on a closed network: no update checks, no sync, no background fetches.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts"


def chromium_or_skip() -> str:
    if Path(CHROMIUM).exists() or shutil.which(CHROMIUM):
        return CHROMIUM
    message = f"{CHROMIUM} is missing: install Debian's chromium (make test does, as root)"
    if os.environ.get("CI"):
        pytest.fail(f"CI needs the browser tests: {message}")
    pytest.skip(f"BROWSER TESTS SKIPPED: {message}")


# Playwright's sync API keeps an event loop running while it is open: close it
# with the module, so the async tests that may follow get a loop of their own.
@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    executable = chromium_or_skip()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    # Retries wait 30 s: a test that retries an unreachable agent does it with the button.
    app = ServedApp(tmp_path_factory.mktemp("browser"), self_approving=True, COUNTERSIGN_POLL_INTERVAL="0.2",
                    COUNTERSIGN_RETRY_BASE="30").start()
    code = ("from django.contrib.auth import get_user_model; "
            "from django.contrib.auth.models import Group; "
            "get_user_model().objects.create_user('alice', password='alice-pass-1234', first_name='Alice')"
            ".groups.add(Group.objects.get(name='Reviewers'))")
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=app.env, check=True,
                   capture_output=True, timeout=60)
    yield app
    app.stop()


class Reviewer:
    """One person in one browser context, logged in, with every page error collected."""

    def __init__(self, browser, site, username, password):
        self.site = site
        self.context = browser.new_context(viewport={"width": 1280, "height": 1000})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        self.page.goto(f"{site.url}/accounts/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(f"{site.url}/inbox/")

    def open(self, path: str):
        self.page.goto(f"{self.site.url}{path}")
        return self.page

    def screenshot(self, name: str):
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    def close(self):
        assert self.errors == [], self.errors
        self.context.close()


@pytest.fixture
def reviewer(browser, site):
    person = Reviewer(browser, site, "reviewer", "countersign")
    yield person
    person.close()


@pytest.fixture
def alice(browser, site):
    person = Reviewer(browser, site, "alice", "alice-pass-1234")
    yield person
    person.close()
