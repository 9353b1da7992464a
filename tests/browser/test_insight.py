"""Issue 14's "Done when", the dashboard's part, in real Chromium: the time-to-decision figures match the decisions
just made, and the page follows them live while it is open.

The reviewer keeps /insight/ open; Alice approves one request in her inbox and the reviewer answers two more
through the API. Without a reload the dashboard counts the three decisions, and its p50 and p95 are those of
the three times the API reports (raised → closed), to the microsecond; no CSP violation, no script error.
"""

from datetime import datetime

import pytest
from playwright.sync_api import expect

from interrupts.reads.insight import nearest_rank
from interrupts.web.charts import duration_text

from .test_review import TIMEOUT, inbox_for, start

# Collects what the browser refuses under the CSP (an inline style, a script from elsewhere): none is expected.
CSP_WATCH = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
"""


def _figure(page, testid: str) -> str:
    return page.get_by_test_id(testid).inner_text().strip()


@pytest.fixture
def watched(reviewer):
    console: list[str] = []
    reviewer.page.on("console", lambda message: message.type == "error" and console.append(message.text))
    reviewer.context.add_init_script(CSP_WATCH)
    return reviewer, console


def test_the_dashboard_reads_the_decisions_just_made_live(watched, alice, site):
    reviewer, console = watched
    page = reviewer.open("/insight/?period=day")
    expect(page.get_by_role("heading", name="Insight")).to_be_visible()
    before = int(_figure(page, "decided-count"))
    pending_before = int(_figure(page, "pending-total"))

    threads = [start(site, "mailer", f"Email team{n}@example.com about the dashboard") for n in range(3)]
    # Raised while the page is open: the pending figure follows without a reload.
    expect(page.get_by_test_id("pending-total")).to_have_text(str(pending_before + 3), timeout=TIMEOUT)

    inbox = inbox_for(alice, threads[0])
    inbox.locator("[data-card]").first.get_by_role("button", name="Approve").click()
    expect(inbox.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    with site.api() as api:
        decided = []
        for thread, action in zip(threads[1:], ["reject", "approve"], strict=False):
            (interrupt,) = api.get("/api/interrupts/", params={"thread": thread}).json()["results"]
            answered = api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": action})
            assert answered.status_code == 201, answered.text
        for thread in threads:
            (interrupt,) = api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]
            decided.append(interrupt)
        everyone = api.get("/api/insight/", params={"period": "day"}).json()

    expect(page.get_by_test_id("decided-count")).to_have_text(str(before + 3), timeout=TIMEOUT)
    assert page.locator("#insight-figures").get_attribute("data-refreshed")  # swapped in, not reloaded

    took = sorted((datetime.fromisoformat(i["closed_at"]) - datetime.fromisoformat(i["created_at"])).total_seconds()
                  for i in decided)
    if before == 0:  # a fresh site: the figures are exactly these three decisions
        assert _figure(page, "ttd-p50") == duration_text(nearest_rank(took, 50))
        assert _figure(page, "ttd-p95") == duration_text(nearest_rank(took, 95))
    mailer = everyone["time_to_decision"]["by_agent"]
    (row,) = [r for r in mailer if r["agent"] == "mailer"]
    # The page's table of the mailer's times, to the microsecond, as the API reports them.
    page.get_by_text("Time to decision as tables").click()
    cells = page.get_by_test_id("ttd-table-agent").get_by_test_id("ttd-row").filter(has_text="mailer")
    assert float(cells.locator("td").nth(1).get_attribute("data-seconds")) == row["p50_seconds"]
    assert float(cells.locator("td").nth(2).get_attribute("data-seconds")) == row["p95_seconds"]
    if before == 0:
        assert (row["count"], row["p50_seconds"], row["p95_seconds"]) == (3, took[1], took[2])
    # Alice's approval is hers; the API's two are the reviewer's.
    reviewers = {r["reviewer"]: r["count"] for r in everyone["time_to_decision"]["by_reviewer"]}
    assert reviewers.get("alice", 0) >= 1 and reviewers.get("reviewer", 0) >= 2
    expect(page.locator("#chart-ttd-agent svg")).to_be_visible()
    expect(page.locator("#chart-outcomes svg")).to_be_visible()
    reviewer.screenshot("insight")

    # The charts' exported numbers are the page's.
    exported = page.request.get(f"{site.url}/insight/export.json?period=day").json()
    assert [r for r in exported["time_to_decision"]["by_agent"] if r["agent"] == "mailer"] == [row]
    assert page.evaluate("window.__cspViolations") == []
    assert console == []
