"""Browser notifications of new requests in real Chromium: opt-in, only while the tab is hidden, one per raise.

Headless Chromium reports every page "visible", even one behind another page
brought to front, so the init script below stands in for the tab going to the
background: it overrides document.visibilityState (and fires visibilitychange).
It also replaces window.Notification with a spy that records each notification
made, with the browser's real permission behind it.
"""

import json

import pytest
from playwright.sync_api import expect

from .conftest import Reviewer, settled
from .test_review import TIMEOUT, start

SPY = """
(() => {
  let hidden = false;
  Object.defineProperty(Document.prototype, "visibilityState",
                        {configurable: true, get: () => hidden ? "hidden" : "visible"});
  Object.defineProperty(Document.prototype, "hidden", {configurable: true, get: () => hidden});
  window.setTabHidden = (value) => { hidden = value; document.dispatchEvent(new Event("visibilitychange")); };
  const Real = window.Notification;
  const forced = %(permission)s;
  window.notified = [];
  function Spy(title, options) {
    window.notified.push({title, body: (options || {}).body, tag: (options || {}).tag});
    this.close = () => {};
  }
  Object.defineProperty(Spy, "permission", {get: () => forced || Real.permission});
  Spy.requestPermission = () => forced ? Promise.resolve(forced) : Real.requestPermission();
  window.Notification = Spy;
})();
"""


def person(browser, site, permission=None):
    reviewer = Reviewer(browser, site, "reviewer", "countersign")
    reviewer.context.add_init_script(SPY % {"permission": json.dumps(permission)})
    return reviewer


@pytest.fixture
def watcher(full_browser, site):
    # The full browser: its headless shell reports every site's notifications denied.
    reviewer = person(full_browser, site)
    reviewer.context.grant_permissions(["notifications"], origin=site.url)
    yield reviewer
    reviewer.close()


def notified(page):
    return page.evaluate("window.notified")


def wait_for_badge(page, count):
    expect(page.locator("#pending-badge")).to_have_text(str(count), timeout=TIMEOUT)


def heard_out(page, count):
    """Until the page has handled the raise: the badge shows the recount ("mine", which follows "changed"
    and is where alerts.js decides to notify) and the list's refresh is back."""
    wait_for_badge(page, count)
    expect(page.locator(".htmx-request")).to_have_count(0, timeout=TIMEOUT)
    settled(page)


def test_a_new_request_while_the_tab_is_hidden_notifies_once_and_none_while_visible(watcher, site):
    page = watcher.open("/inbox/")
    toggle, state = page.get_by_test_id("alerts-toggle"), page.get_by_test_id("alerts-state")
    expect(state).to_have_text("Notifications: off")
    toggle.click()  # permission asked on this click (granted to the context), and remembered
    expect(state).to_contain_text("Notifications: on")
    page.reload()
    expect(page.get_by_test_id("alerts-state")).to_contain_text("Notifications: on")
    wait_for_badge(page, 0)

    page.evaluate("setTabHidden(true)")
    start(site, "janitor")
    heard_out(page, 1)
    assert notified(page) == [{"title": "New request waiting: 1 pending", "body": "Countersign inbox",
                               "tag": "countersign-new-request"}]

    page.evaluate("setTabHidden(false)")
    start(site, "janitor")
    heard_out(page, 2)
    assert len(notified(page)) == 1  # looking at the page: no notification

    # Switched off: hidden again, a new request, and still none.
    page.get_by_test_id("alerts-toggle").click()
    expect(page.get_by_test_id("alerts-state")).to_have_text("Notifications: off")
    page.evaluate("setTabHidden(true)")
    start(site, "janitor")
    heard_out(page, 3)
    assert len(notified(page)) == 1


def test_notifications_the_browser_blocks_are_shown_as_blocked(browser, site):
    reviewer = person(browser, site, permission="denied")
    try:
        page = reviewer.open("/inbox/")
        expect(page.get_by_test_id("alerts-state")).to_have_text(
            "Notifications: blocked by the browser (allow them in the site's settings)")
        expect(page.get_by_test_id("alerts-toggle")).to_be_disabled()
    finally:
        reviewer.close()
