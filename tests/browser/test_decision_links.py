"""Deciding from an email in real Chromium: the link leads through login to a confirm page, decides once, and
works for nobody else."""

import email
import re
import time

import pytest
from playwright.sync_api import expect

from ..servers import ServedApp, manage
from .conftest import Reviewer
from .test_review import TIMEOUT, start

LINK = re.compile(r"(Approve|Reject|Open): https?://[^/\s]+(/decide/[\w-]+/)")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The browser tests' app, writing its emails to files; Alice, a reviewer, reads hers."""
    folder = tmp_path_factory.mktemp("mails")
    app = ServedApp(tmp_path_factory.mktemp("links"), self_approving=True, colleague=True,
                    COUNTERSIGN_POLL_INTERVAL="0.2", EMAIL_FILE_PATH=str(folder)).start()
    done = manage("shell", "-c", "from django.contrib.auth import get_user_model\n"
                  "get_user_model().objects.filter(username='alice').update(email='alice@example.com')", env=app.env)
    assert done.returncode == 0, done.stderr
    app.mails = folder
    yield app
    app.stop()


def alices_links(site, about: str) -> dict[str, str]:
    """Alice's links (paths) in the email about ``about``, once it is sent."""
    deadline = time.monotonic() + TIMEOUT / 1000
    while time.monotonic() < deadline:
        for sent in site.mails.glob("*.log"):
            for raw in sent.read_text().split("\n" + "-" * 79 + "\n"):
                message = email.message_from_string(raw.strip())
                body = (message.get_payload(decode=True) or b"").decode()
                if message["To"] == "alice@example.com" and about in body:
                    return {action.lower(): path for action, path in LINK.findall(body)}
        time.sleep(0.05)
    raise AssertionError(f"no email to Alice about {about!r}")


def test_a_link_from_the_email_leads_through_login_to_a_confirm_page_and_decides_once(browser, site):
    start(site, "mailer", "Email g@h.com about lunch")
    found = alices_links(site, "g@h.com")
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(f"{site.url}{found['approve']}")
        # Not logged in: the login page first, then back to the link's page. Nothing decided yet.
        page.fill("#id_username", "alice")
        page.fill("#id_password", "alice-pass-1234")
        page.click("button[type=submit]")
        confirm = page.get_by_test_id("confirm-approve")
        expect(confirm).to_be_visible(timeout=TIMEOUT)
        expect(page.get_by_test_id("args")).to_contain_text("g@h.com")
        expect(page.get_by_test_id("confirm-reject")).to_have_count(0)
        confirm.click()
        expect(page.get_by_test_id("decision").first).to_contain_text("Approved by Alice", timeout=TIMEOUT)
        # The same link again, or replayed: refused, and it says why.
        page.goto(f"{site.url}{found['approve']}")
        expect(page.get_by_test_id("link-refused")).to_contain_text("used already")
    finally:
        context.close()


def test_a_link_forwarded_to_another_reviewer_is_refused(browser, site):
    start(site, "mailer", "Email k@l.com about tea")
    found = alices_links(site, "k@l.com")
    other = Reviewer(browser, site, "reviewer", "countersign")
    try:
        other.open(found["approve"])
        expect(other.page.get_by_test_id("link-refused")).to_contain_text("sent to someone else")
        expect(other.page.get_by_test_id("confirm-approve")).to_have_count(0)
    finally:
        other.close()
