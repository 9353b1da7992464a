"""Debian's Chromium, one per test process (each xdist worker), launched at first use and shared by every browser test.

Tests run in Debian's build of Chromium's headless shell (package chromium-headless-shell, the same
source and version as its chromium): the build Playwright itself runs headless. tests/browser cost
322 CPU-s in it against 455 in the full browser's headless mode, on 2 cores at 4 workers. A test
that needs what only the full browser has (a real notification permission) asks for ``full``.
Where the shell is not installed, every test runs in the full browser.
"""

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
HEADLESS_SHELL = os.environ.get("CHROMIUM_HEADLESS_SHELL", "/usr/bin/chromium-headless-shell")
# Quiet on a closed network: no update checks, no sync, no background fetches.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

_playwright = None
_browsers: dict[bool, object] = {}


def _installed(path: str) -> bool:
    return Path(path).exists() or shutil.which(path) is not None


def chromium_or_skip(full: bool = False) -> str:
    if not full and _installed(HEADLESS_SHELL):
        return HEADLESS_SHELL
    if _installed(CHROMIUM):
        return CHROMIUM
    message = f"{CHROMIUM} is missing: install Debian's chromium (make test does, as root)"
    if os.environ.get("CI"):
        pytest.fail(f"CI needs the browser tests: {message}")
    pytest.skip(f"BROWSER TESTS SKIPPED: {message}")


def shared(full: bool = False):
    """The process's headless shell (or, ``full``, its full Chromium), launched now if it is not running."""
    global _playwright
    browser = _browsers.get(full)
    if browser is None or not browser.is_connected():
        executable = chromium_or_skip(full)
        if _playwright is None:
            from playwright.sync_api import sync_playwright

            _playwright = sync_playwright().start()
        browser = _browsers[full] = _playwright.chromium.launch(executable_path=executable, args=FLAGS)
    return browser


def close() -> None:
    """Stop every Chromium and Playwright's event loop, so a test after it gets a loop of its own."""
    global _playwright
    browsers = list(_browsers.values())
    _browsers.clear()
    try:
        for browser in browsers:
            browser.close()
    finally:
        if _playwright is not None:
            try:
                _playwright.stop()
            finally:
                _playwright = None
