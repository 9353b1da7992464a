"""A standing grant in real Chromium: made on a card, it approves the next call like it; revoked there, it stops."""

import time

from playwright.sync_api import expect

from .test_review import TIMEOUT, inbox_for, start


def settled_by_grant(site, agent: str, message: str) -> str:
    """A thread of ``agent`` whose interrupt a grant approved: recorded, and decided without a card."""
    with site.api() as api:
        response = api.post("/api/threads/", json={"agent": agent, "message": message})
        assert response.status_code == 201, response.text
        thread = response.json()["thread"]
        deadline = time.monotonic() + TIMEOUT / 1000
        while time.monotonic() < deadline:
            found = api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]
            if found and found[0]["status"] != "pending":
                assert found[0]["status"] == "resolved", found
                return thread
            time.sleep(0.05)
    raise AssertionError(f"no grant approved {message!r}: {found}")


def test_a_grant_made_on_a_card_approves_the_next_call_until_revoked(reviewer, site):
    thread = start(site, "mailer", "Email g@h.com about lunch")
    page = inbox_for(reviewer, thread)
    card = page.locator("[data-card]").first
    grant = card.get_by_test_id("grant")
    grant.locator("summary").click()
    # Held to this recipient; any subject and body.
    for name in ("subject", "body"):
        grant.locator(f"input[name=grant_hold][value={name}]").uncheck()
    expect(grant.locator("input[name=grant_hold][value=to]")).to_be_checked()
    # What it would have approved, before it is made: only this call has been to g@h.com.
    grant.get_by_test_id("simulate-grant").click()
    expect(grant.get_by_test_id("simulated-covered")).to_have_text("1", timeout=TIMEOUT)
    grant.get_by_label("For").select_option("1")
    grant.get_by_label("Why").fill("Lunch notes to g@h.com are routine")
    grant.get_by_test_id("approve-and-grant").click()
    expect(page.get_by_test_id("outcome").first).to_contain_text("Approved", timeout=TIMEOUT)

    # The next email to g@h.com is approved by the grant: no card, and its thread says whose grant it was.
    covered = settled_by_grant(site, "mailer", "Email g@h.com about dinner")
    page = reviewer.open(f"/threads/{covered}/")
    decision = page.get_by_test_id("decision").first
    expect(decision).to_contain_text("Approved by Demo Reviewer's standing grant", timeout=TIMEOUT)
    # The Grants page lists it, one call used.
    listing = reviewer.open("/grants/").get_by_test_id("grants")
    expect(listing).to_contain_text("Lunch notes to g@h.com are routine")
    expect(listing).to_contain_text("1 call")

    page = reviewer.open(f"/threads/{covered}/")
    page.get_by_test_id("revoke-grant").first.click()
    expect(page.locator(".messages")).to_contain_text("Revoked the grant", timeout=TIMEOUT)
    # Revoked: the next one asks a person again.
    asked = start(site, "mailer", "Email g@h.com about tea")
    expect(inbox_for(reviewer, asked).locator("[data-card]").first).to_be_visible()
    expect(reviewer.open("/grants/").get_by_test_id("grants")).to_contain_text("Revoked by Demo Reviewer")
