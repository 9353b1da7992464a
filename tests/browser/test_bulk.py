"""Bulk decisions in real Chromium: pick cards by click, shift-click and `x`, or all matching a filter; one action."""

import re
import time

import pytest
from playwright.sync_api import expect

from ..e2e.scripted_agent import batch_interrupts
from ..loopback import LoopbackAgent, stream
from .conftest import runs_settled
from .test_review import TIMEOUT, inbox_for, start


class ThreeAtOnce(LoopbackAgent):
    """One run raising three confirmations at once; it keeps every body, so a test counts the resumes."""

    script = staticmethod(batch_interrupts(3))

    def __init__(self):
        super().__init__()
        self.bodies: list[dict] = []

    def answer(self, handler, path, body):
        self.bodies.append(body)
        stream(handler, self.script(body))

    def resumes(self, thread: str) -> list[dict]:
        return [b for b in list(self.bodies) if b["threadId"] == thread and b.get("resume")]


@pytest.fixture(scope="module")
def trio(site):
    agent = ThreeAtOnce().start()
    with site.api() as api:
        assert api.post("/api/agents/", json={"name": "trio", "url": f"{agent.url}/trio/"}).status_code == 201
    yield agent
    agent.stop()


def pick(page, interrupt_id, **click):
    page.locator(f"[data-card][data-interrupt-id='{interrupt_id}'] input[data-bulk-pick]").click(**click)


def picked(page) -> list[str]:
    return page.locator("[data-card]:has(input[data-bulk-pick]:checked)").evaluate_all(
        "cards => cards.map(c => c.dataset.interruptId)")


def test_pick_with_click_shift_click_and_x_then_approve_with_one_skipped(reviewer, alice, site, trio):
    batch = start(site, "trio")
    chore = start(site, "janitor")
    page = reviewer.open("/inbox/")
    expect(page.locator("[data-card]")).to_have_count(4, timeout=TIMEOUT)
    count = page.get_by_test_id("bulk-count")
    # A click, then a shift-click: the three cards of the batch, the one between included.
    pick(page, "int-0")
    expect(count).to_have_text("1 selected.")
    pick(page, "int-2", modifiers=["Shift"])
    expect(count).to_have_text("3 selected.")
    assert picked(page) == ["int-0", "int-1", "int-2"]
    # `x` toggles the focused card.
    page.locator("[data-card][data-interrupt-id='confirm-clear']").focus()
    page.keyboard.press("x")
    expect(count).to_have_text("4 selected.")
    page.keyboard.press("x")
    expect(count).to_have_text("3 selected.")
    page.keyboard.press("x")
    expect(count).to_have_text("4 selected.")

    # Meanwhile Alice decides the chore. The live refresh replaces the batch's cards: they stay ticked.
    inbox_for(alice, chore).locator("[data-card]").first.get_by_role("button", name="Yes").click()
    expect(page.locator("section.batch.gone")).to_have_count(1, timeout=TIMEOUT)
    assert picked(page)[:3] == ["int-0", "int-1", "int-2"]
    expect(count).to_have_text("4 selected.")

    page.locator("#bulk").get_by_role("button", name="Approve selected").click()
    summary = page.get_by_test_id("bulk-summary")
    expect(summary).to_have_text("3 approved, 1 skipped", timeout=TIMEOUT)
    skipped = page.get_by_test_id("bulk-skipped")
    expect(skipped).to_contain_text("was already decided by Alice")  # the reason in words, not only its code
    expect(page.get_by_test_id("bulk-result")).to_have_attribute("role", "status")
    reviewer.screenshot("bulk-approved")
    # The list was read again, and the selection is spent.
    expect(page.locator("[data-card]")).to_have_count(0, timeout=TIMEOUT)
    expect(count).to_have_text("Tick cards to decide several at once.")

    # The batch was resumed once, with its three answers.
    for _ in range(100):
        if trio.resumes(batch):
            break
        time.sleep(0.05)
    runs_settled(site, batch)  # a second resume would be a run queued or streaming now
    [resume] = trio.resumes(batch)
    assert sorted(entry["interruptId"] for entry in resume["resume"]) == ["int-0", "int-1", "int-2"]
    [raised] = [b for b in trio.bodies if b["threadId"] == batch and not b.get("resume")]
    with site.api() as api:
        assert api.get(f"/api/runs/{raised['runId']}/").json()["resumed_by"] == resume["runId"]


def test_select_all_matching_the_filter_decides_only_what_it_matches(reviewer, site, trio):
    chores = [start(site, "janitor"), start(site, "janitor")]
    mail = start(site, "mailer")
    page = reviewer.open("/inbox/")
    expect(page.locator("[data-card]")).to_have_count(3, timeout=TIMEOUT)
    # The filter changes through htmx (no reload): the bulk form follows the address shown.
    page.get_by_test_id("filters").locator("summary").click()  # the inbox's filters fold behind one Filter
    page.locator("form[data-filters] select[name=agent]").select_option("janitor")
    expect(page.locator("[data-card]")).to_have_count(2, timeout=TIMEOUT)
    expect(page).to_have_url(re.compile(r"/inbox/\?.*agent=janitor"))
    everything = page.get_by_test_id("bulk-everything")
    expect(page.locator("label.bulk-everything")).to_have_text("Select all 2 matching this filter")
    everything.check()
    expect(page.get_by_test_id("bulk-count")).to_have_text("All 2 matching this filter selected.")
    page.locator("#bulk").get_by_role("button", name="Reject selected").click()
    expect(page.get_by_test_id("bulk-summary")).to_have_text("2 rejected", timeout=TIMEOUT)
    expect(page.locator("[data-card]")).to_have_count(0, timeout=TIMEOUT)
    with site.api() as api:
        for thread in chores:
            [asked] = api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]
            assert asked["status"] == "resolved"
        [left] = api.get("/api/interrupts/", params={"thread": mail}).json()["results"]
        assert left["status"] == "pending"  # another agent's: not matching the filter, not touched
