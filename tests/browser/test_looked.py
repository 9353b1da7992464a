"""Proof the reviewer looked, in real Chromium: long args wait to be opened where policy asks, and the decision
records what the card had open and for how long."""

from playwright.sync_api import expect

from .test_review import TIMEOUT, inbox_for, start

LONG_MESSAGE = "Email g@h.com about " + "the quarterly numbers and what each of them means for us, " * 9


def test_long_args_wait_to_be_read_and_the_decision_records_what_the_card_had_open(reviewer, site):
    with site.api() as api:
        made = api.post("/api/policies/", json={"name": "read the mail", "agent": "mailer", "tool_name": "sendEmail",
                                                "allow_self_approval": True, "require_look": True})
        assert made.status_code == 201, made.text
    try:
        thread = start(site, "mailer", LONG_MESSAGE)
        page = inbox_for(reviewer, thread)
        card = page.locator("[data-card]").first
        approve = card.locator("button[name=action][value=approve]")
        expect(card.get_by_test_id("look-first")).to_be_visible()
        expect(approve).to_be_disabled()
        card.locator("details.as-json > summary").click()
        expect(approve).to_be_enabled()
        approve.click()
        expect(page.get_by_test_id("outcome").first).to_contain_text("Approved", timeout=TIMEOUT)
        with site.api() as api:
            [interrupt] = api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]
            [decision] = api.get(f"/api/interrupts/{interrupt['id']}/").json()["decisions"]
        seen = decision["looked"]
        assert seen["opened"] == ["args"] and seen["seconds"] > 0 and seen["shown"].startswith("sha256:"), seen
    finally:
        with site.api() as api:
            api.delete("/api/policies/read the mail/")
