"""The thread page, live, in real Chromium at 1440x900 and 390x844 (issue 15, point 7).

A run started from the Threads page streams (held open by the scripted agent's gate), pauses for a
decision, and the Runs list says so without a reload; Alice decides in her own browser with a comment,
and the page shows her decision where it happened (after the pause, before the resumed run), lists the
resumed run and sees it finish, names the tool whose result came back, and never scrolls sideways.
"""

import re

import pytest
from playwright.sync_api import expect

from ..e2e.scripted_agent import Gate, ScriptedAgent
from .conftest import Reviewer, axe_check, no_sideways_scroll, shoot
from .test_review import TIMEOUT

WIDTHS = {1440: 900, 390: 844}


@pytest.fixture(scope="module")
def gated(site):
    agent = ScriptedAgent().start()
    with site.api() as api:
        response = api.post("/api/agents/", json={"name": "gated", "url": f"{agent.url}/gated/"})
        assert response.status_code == 201, response.text
    yield agent
    agent.stop()


@pytest.fixture(scope="module")
def people(browser, site):
    """The demo reviewer, who starts the runs, and Alice, who decides them: logged in once for both widths."""
    reviewer = Reviewer(browser, site, "reviewer", "countersign")
    alice = Reviewer(browser, site, "alice", "alice-pass-1234")
    yield reviewer, alice
    reviewer.close()
    alice.close()


def statuses(page):
    return page.get_by_test_id("run-status")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_runs_list_and_the_timeline_follow_a_run_through_its_decision_without_a_reload(people, gated, width):
    reviewer, alice = people
    page = reviewer.page
    page.set_viewport_size({"width": width, "height": WIDTHS[width]})
    gated.gate = gate = Gate()  # the stream waits after RUN_STARTED until the test opens it
    try:
        page = reviewer.open("/threads/")
        page.locator("select[name=agent]").select_option("gated")
        page.locator("textarea[name=message]").fill(f"Delete acme/web ({width})")
        page.get_by_role("button", name="Start run").click()
        page.wait_for_url(re.compile(r"/threads/thread-[0-9a-f]+/$"))
        thread = page.url.rstrip("/").rsplit("/", 1)[1]
        page.evaluate("window.notReloaded = true")
        expect(statuses(page)).to_have_text(["streaming"], timeout=TIMEOUT)
    finally:
        gate.open()
    expect(statuses(page)).to_have_text(["paused for 1 decision"], timeout=TIMEOUT)
    expect(page.locator(".run-end.outcome-interrupt")).to_be_visible()
    expect(page.get_by_role("button", name="Start run")).to_be_disabled()
    first_run = page.locator("#runs li").first.get_attribute("data-run")

    # Alice, in her own browser, approves with a comment.
    inbox = alice.open(f"/inbox/?thread={thread}")
    card = inbox.locator("[data-card]").first
    expect(card).to_be_visible(timeout=TIMEOUT)
    card.locator("input[name=comment]").first.fill(f"checked the repo · {width}")
    card.get_by_role("button", name="Approve").first.click()

    # The decision shows where it happened, with its comment; the resumed run is listed and finishes.
    decision = page.locator(f"[data-decisions='{first_run}'] [data-testid=decision]")
    expect(decision).to_contain_text("Approved", timeout=TIMEOUT)
    expect(decision).to_contain_text("Alice")
    expect(decision.get_by_test_id("decision-comment")).to_have_text(f"checked the repo · {width}")
    expect(statuses(page)).to_have_text(["paused, decided", "finished"], timeout=TIMEOUT)
    expect(page.get_by_test_id("result-tool")).to_have_text("deleteRepo", timeout=TIMEOUT)
    expect(page.get_by_role("button", name="Start run")).to_be_enabled(timeout=TIMEOUT)
    resumed = page.locator("#runs li").nth(1).get_attribute("data-run")
    order = page.evaluate("""([first, resumed]) => {
        const end = document.querySelector(`[data-run-end="${first}"]`);
        const decided = document.querySelector(`[data-decisions="${first}"]`);
        const start = document.getElementById(`run-${resumed}`);
        return [end.nextElementSibling === decided,
                !!(decided.compareDocumentPosition(start) & Node.DOCUMENT_POSITION_FOLLOWING)];
    }""", [first_run, resumed])
    assert order == [True, True]
    assert page.evaluate("window.notReloaded") is True

    # Readable at this width, light and dark: the page never scrolls sideways; code blocks scroll inside and
    # take the focus; axe finds nothing serious.
    no_sideways_scroll(page)
    blocks = page.locator(".history pre")
    assert blocks.count() >= 2
    assert all(b.get_attribute("tabindex") == "0" and b.get_attribute("aria-label") for b in blocks.all())
    blocks.first.focus()
    expect(blocks.first).to_be_focused()
    axe_check(page, "thread-live")
    shoot(page, "thread-live")
    page.emulate_media(color_scheme="dark")
    try:
        axe_check(page, "thread-live, dark", rules=["color-contrast", "link-in-text-block"])
        if width == 390:
            shoot(page, "thread-live-dark")
    finally:
        page.emulate_media(color_scheme="light")
