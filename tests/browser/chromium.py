"""One Chromium per test process (each xdist worker), launched at first use and shared by every browser test."""

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Quiet on a closed network: no update checks, no sync, no background fetches.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

_playwright = None
_browser = None


def chromium_or_skip() -> str:
    if Path(CHROMIUM).exists() or shutil.which(CHROMIUM):
        return CHROMIUM
    message = f"{CHROMIUM} is missing: install Debian's chromium (make test does, as root)"
    if os.environ.get("CI"):
        pytest.fail(f"CI needs the browser tests: {message}")
    pytest.skip(f"BROWSER TESTS SKIPPED: {message}")


def shared():
    """The process's Chromium, launched now if it is not running."""
    global _playwright, _browser
    if _browser is None or not _browser.is_connected():
        executable = chromium_or_skip()
        from playwright.sync_api import sync_playwright

        close()
        _playwright = sync_playwright().start()
        _browser = _playwright.chromium.launch(executable_path=executable, args=FLAGS)
    return _browser


def close() -> None:
    """Stop Chromium and Playwright's event loop, so a test after it gets a loop of its own."""
    global _playwright, _browser
    if _browser is not None:
        try:
            _browser.close()
        finally:
            _browser = None
    if _playwright is not None:
        try:
            _playwright.stop()
        finally:
            _playwright = None
