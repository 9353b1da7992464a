"""An answer the agent refuses, seen live and dealt with in real Chromium: reopened and answered again, or closed."""

import pytest
from playwright.sync_api import expect

from ..e2e.scripted_agent import AgentProcess
from ..servers import free_port
from .test_review import TIMEOUT, inbox_for, start


@pytest.fixture(scope="module")
def refuser(site, tmp_path_factory):
    """The scripted agent whose first resume of each thread answers RUN_ERROR STALE_APPROVAL."""
    agent = AgentProcess(free_port(), tmp_path_factory.mktemp("refuser") / "calls.jsonl").start()
    with site.api() as api:
        response = api.post("/api/agents/", json={"name": "refuser",
                                                  "url": f"http://127.0.0.1:{agent.port}/refuse-error/"})
        assert response.status_code == 201, response.text
    yield agent
    if agent.process.poll() is None:
        agent.kill()


def refused_in_the_inbox(reviewer, site, thread):
    page = inbox_for(reviewer, thread)
    page.locator("[data-card]").first.get_by_role("button", name="Approve").click()
    # The inbox hears the resume fail (no reload) and says what the agent said.
    refused = page.get_by_test_id("refused-run")
    expect(refused.get_by_test_id("refusal")).to_have_text(
        "The agent refused the answer: STALE_APPROVAL The approval came too late", timeout=TIMEOUT)
    return page


def test_a_refused_answer_is_reopened_from_the_inbox_and_answered_again(reviewer, site, refuser):
    thread = start(site, "refuser")
    page = refused_in_the_inbox(reviewer, site, thread)
    reviewer.screenshot("refused-answer-inbox")
    page.get_by_test_id("refused-run").get_by_role("button", name="Reopen to answer again").click()
    # (The "Reopened" note may already be replaced by the live refresh the reopening causes.)
    expect(page.get_by_test_id("refused-run")).to_have_count(0, timeout=TIMEOUT)
    card = page.locator("[data-card]").first
    expect(card).to_be_visible(timeout=TIMEOUT)  # the batch waits again, without a reload
    card.get_by_role("button", name="Approve").click()
    # Leaving the page before the decision is answered would abort its request.
    expect(page.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    page = reviewer.open(f"/threads/{thread}/")
    expect(page.get_by_test_id("tool-result").last).to_contain_text("int-1", timeout=TIMEOUT)
    resumes = [c["body"] for c in refuser.calls() if c["body"].get("resume") and c["body"]["threadId"] == thread]
    assert len(resumes) == 2


def test_a_refused_answer_holds_the_thread_until_it_is_closed_there(reviewer, site, refuser):
    thread = start(site, "refuser")
    page = reviewer.open(f"/threads/{thread}/")
    start_button = page.locator("[data-start-run] button[type=submit]")
    expect(start_button).to_be_disabled()  # waiting for the decision
    # Decided elsewhere; the thread page hears the resume fail and shows the refused answer, live.
    with site.api() as api:
        [asked] = api.get("/api/interrupts/", params={"thread": thread}).json()["results"]
        assert api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "approve"}).status_code == 201
    refused = page.get_by_test_id("refused-run")
    expect(refused.get_by_test_id("refusal")).to_contain_text("STALE_APPROVAL", timeout=TIMEOUT)
    expect(start_button).to_be_disabled()
    reviewer.screenshot("refused-answer-thread")
    refused.get_by_role("button", name="Close the batch").click()
    expect(page.get_by_test_id("refused-run")).to_have_count(0, timeout=TIMEOUT)
    expect(start_button).to_be_enabled(timeout=TIMEOUT)
