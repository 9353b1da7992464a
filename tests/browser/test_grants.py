"""Approvals without asking in real Chromium: a grant made on a card, a policy's rule simulated on its form."""

import json
import time

from playwright.sync_api import expect

from .test_review import TIMEOUT, inbox_for, start


def settled_by_grant(site, agent: str, message: str) -> str:
    """A thread of ``agent`` whose interrupt a grant or policy approved: recorded, and decided without a card."""
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


def test_a_policy_s_rule_is_simulated_on_its_form_then_approves_in_its_setter_s_name(reviewer, site):
    rule = {"properties": {"to": {"const": "g@h.com"}}, "required": ["to"]}
    page = reviewer.open("/policies/add/")
    page.get_by_label("Name", exact=True).fill("mail to g")
    page.get_by_label("Agent", exact=True).select_option(label="mailer")
    page.get_by_label("Tool", exact=True).fill("sendEmail")
    page.get_by_label("Self-approval allowed").check()  # the demo reviewer both asks and set the rule
    page.get_by_label("Approve automatically, in my name").check()
    args = page.get_by_label("…only when the args match")
    args.fill('{"type": 7}')
    page.get_by_test_id("simulate-policy").click()
    simulated = page.get_by_test_id("policy-simulation")
    expect(simulated).to_contain_text("Fix the form first", timeout=TIMEOUT)
    args.fill(json.dumps(rule))
    page.get_by_test_id("simulate-policy").click()
    # The page says what the API's replay says, before anything is saved.
    with site.api() as api:
        replay = api.post("/api/policies/simulate/", json={
            "name": "mail to g", "agent": "mailer", "tool_name": "sendEmail", "allow_self_approval": True,
            "auto_approve": True, "auto_approve_args": rule}).json()
    assert replay["covered"] >= 1, replay  # the grant test's lunch, dinner and tea went to g@h.com
    expect(simulated.get_by_test_id("simulated-calls")).to_have_text(str(replay["calls"]), timeout=TIMEOUT)
    expect(simulated.get_by_test_id("simulated-approved")).to_contain_text(f"{replay['covered']} match its rule")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_test_id("auto-approve")).to_contain_text("in Demo Reviewer's name", timeout=TIMEOUT)
    try:
        covered = settled_by_grant(site, "mailer", "Email g@h.com about supper")
        decision = reviewer.open(f"/threads/{covered}/").get_by_test_id("decision").first
        expect(decision).to_contain_text("Approved by policy mail to g, set by Demo Reviewer", timeout=TIMEOUT)
    finally:
        with site.api() as api:
            assert api.delete("/api/policies/mail to g/").status_code == 204
