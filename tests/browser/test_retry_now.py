"""A resume whose agent is down, seen and retried from the inbox in real Chromium."""

import pytest
from playwright.sync_api import expect

from ..e2e.scripted_agent import AgentProcess
from ..servers import free_port
from .test_review import TIMEOUT, inbox_for, start


@pytest.fixture
def flaky(site, tmp_path):
    agent = AgentProcess(free_port(), tmp_path / "calls.jsonl").start()
    with site.api() as api:
        response = api.post("/api/agents/", json={"name": "flaky", "url": f"http://127.0.0.1:{agent.port}/approve/"})
        assert response.status_code == 201, response.text
    yield agent
    if agent.process.poll() is None:
        agent.kill()


def test_retry_now_from_the_inbox_delivers_the_resume_once_the_agent_is_back(reviewer, site, flaky):
    thread = start(site, "flaky")
    page = inbox_for(reviewer, thread)
    flaky.kill()
    page.locator("[data-card]").first.get_by_role("button", name="Approve").click()

    # The first try fails; the inbox (live, no reload) says so and offers Retry now.
    waiting = page.get_by_test_id("awaiting-run")
    expect(waiting.get_by_test_id("delivery")).to_have_text("Resume pending — agent unreachable, attempt 1",
                                                            timeout=TIMEOUT)
    reviewer.screenshot("resume-pending")
    # The site retries only after 30 s: the second try is the button's doing.
    waiting.get_by_role("button", name="Retry now").click()
    # (Its "Trying … again now" note may already be replaced by the live refresh the failed try causes.)
    expect(waiting.get_by_test_id("delivery")).to_have_text("Resume pending — agent unreachable, attempt 2",
                                                            timeout=TIMEOUT)

    flaky.start()
    waiting.get_by_role("button", name="Retry now").click()
    expect(page.get_by_test_id("awaiting-run")).to_have_count(0, timeout=TIMEOUT)
    page = reviewer.open(f"/threads/{thread}/")
    expect(page.get_by_test_id("tool-result").last).to_contain_text("int-1", timeout=TIMEOUT)
    resumes = [c["body"] for c in flaky.calls() if c["body"].get("resume")]
    assert len(resumes) == 1 and resumes[0]["resume"][0]["payload"] == {"approved": True}
    expect(page.locator(".note.delivery")).to_have_count(2)
