"""A passkey countersignature in real Chromium, with its virtual authenticator (CDP WebAuthn): registered on the
Passkeys page, signing the exact approval a policy asks it for; a session or token without it cannot approve."""

import json
import time

import pytest
from ag_ui.core import RunAgentInput
from playwright.sync_api import expect

from interrupts.protocol import signing
from interrupts.sdk.verify import BadPasskey, attested_approvals, check_passkey

from ..servers import manage
from .test_review import TIMEOUT, start

POLICY = {"name": "keyed mail", "agent": "mailer", "tool_name": "sendEmail", "allow_self_approval": True,
          "require_passkey": True}


@pytest.fixture
def keyed(site):
    with site.api() as api:
        made = api.post("/api/policies/", json=POLICY)
        assert made.status_code == 201, made.text
    yield
    with site.api() as api:
        api.delete(f"/api/policies/{POLICY['name']}/")


def signed_in(browser, site, *, authenticator: bool, who=("reviewer", "countersign")):
    """A page at localhost (a passkey's relying party is a domain, never an IP address), logged in (the
    reviewer, unless ``who`` says), with Chromium's virtual authenticator when asked."""
    base = site.url.replace("127.0.0.1", "localhost")
    context = browser.new_context()
    page = context.new_page()
    if authenticator:
        cdp = context.new_cdp_session(page)
        cdp.send("WebAuthn.enable")
        cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
            "protocol": "ctap2", "transport": "internal", "hasResidentKey": True, "hasUserVerification": True,
            "isUserVerified": True, "automaticPresenceSimulation": True}})
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", who[0])
    page.fill("#id_password", who[1])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/inbox/")
    return context, page, base


def decision_of(site, thread: str) -> tuple[dict, dict]:
    with site.api() as api:
        deadline = time.monotonic() + TIMEOUT / 1000
        while time.monotonic() < deadline:
            [interrupt] = api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]
            found = api.get(f"/api/interrupts/{interrupt['id']}/").json()
            if found["decisions"]:
                return found, found["decisions"][0]
            time.sleep(0.05)
    raise AssertionError("no decision")


def test_a_passkey_signs_the_exact_approval_and_the_sdk_checks_it(browser, site, keyed):
    context, page, base = signed_in(browser, site, authenticator=True)
    try:
        page.goto(f"{base}/settings/passkeys/")
        adding = page.get_by_test_id("add-passkey")
        # The session alone does not add one: a wrong password is refused before the authenticator is asked.
        adding.get_by_label("Your password").fill("not the password")
        adding.get_by_role("button", name="Add a passkey").click()
        expect(adding.locator("[data-passkey-error]")).to_contain_text("takes your password", timeout=TIMEOUT)
        expect(page.get_by_test_id("passkeys")).to_contain_text("No passkey yet")
        adding.get_by_label("Your password").fill("countersign")
        adding.get_by_role("button", name="Add a passkey").click()
        expect(page.get_by_test_id("passkeys")).to_contain_text("My passkey", timeout=TIMEOUT)

        thread = start(site, "mailer", "Email g@h.com about the keys")
        page.goto(f"{base}/inbox/?thread={thread}")
        card = page.locator("[data-card]").first
        expect(card.get_by_test_id("passkey-note")).to_be_visible(timeout=TIMEOUT)
        card.locator("button[name=action][value=approve]").click()
        expect(page.get_by_test_id("outcome").first).to_contain_text("Approved", timeout=TIMEOUT)

        # Edit & approve: its final click takes the passkey too, over the edited args.
        edited = start(site, "mailer", "Email g@h.com about the spare keys")
        page.goto(f"{base}/inbox/?thread={edited}")
        card = page.locator("[data-card]").first
        card.locator("details[data-edit] > summary").click()
        card.locator(".edit-editor").get_by_label("Body", exact=True).fill("Spare keys are in the drawer")
        card.get_by_role("button", name="Review changes").click()
        card.get_by_role("button", name="Approve with these edits").click()
        expect(card).to_have_count(0, timeout=TIMEOUT)
    finally:
        context.close()
    _, with_edits = decision_of(site, edited)
    assert with_edits["action"] == "edit" and with_edits["passkey"]["assertion"], with_edits
    interrupt, decision = decision_of(site, thread)
    block = decision["passkey"]
    assert block["rpId"] == "localhost" and block["origin"] == base, block
    # What the agent's SDK does with the resume's attestation: the fingerprint of this exact answer.
    answer = signing.fingerprint(thread_id=thread, run_id=interrupt["run"], interrupt_id=interrupt["interrupt_id"],
                                 tool_call_id=interrupt["tool_call_id"], status="resolved",
                                 payload=decision["payload"])
    check_passkey(block, answer)
    changed = signing.fingerprint(thread_id=thread, run_id=interrupt["run"], interrupt_id=interrupt["interrupt_id"],
                                  tool_call_id=interrupt["tool_call_id"], status="resolved",
                                  payload={"approved": False})
    with pytest.raises(BadPasskey):
        check_passkey(block, changed)
    with pytest.raises(BadPasskey):
        check_passkey({**block, "policyVersion": None}, answer)
    # The resume Countersign sends the agent, as an SDK agent made with require_passkey=True reads it.
    shown = manage("shell", "-c", "import json; from interrupts.models import Run\n"
                   f"print(json.dumps(Run.objects.get(parent__run_id={interrupt['run']!r}).input))", env=site.env)
    assert shown.returncode == 0, shown.stderr
    resume = RunAgentInput.model_validate(json.loads(shown.stdout.strip().splitlines()[-1]))
    [approval] = attested_approvals(resume, lambda run_input, interrupt_id: [interrupt["tool_call_id"]],
                                    require_passkey=True)[interrupt["interrupt_id"]]
    assert approval.passkey["credentialId"] == block["credentialId"]


def test_a_session_or_token_without_the_passkey_cannot_approve(browser, site, keyed):
    thread = start(site, "mailer", "Email k@l.com about the locks")
    with site.api() as api:  # a token alone (or a stolen session's cookie) is refused, and says why
        [interrupt] = api.get("/api/interrupts/", params={"thread": thread}).json()["results"]
        refused = api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"})
        assert (refused.status_code, refused.json()["code"]) == (403, "PASSKEY_REQUIRED"), refused.text
        rejected = api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "reject"})
        assert rejected.status_code == 201, rejected.text  # saying no takes no passkey
    # Alice, a reviewer with no passkey: her session approves nothing, and the card says what to do.
    thread = start(site, "mailer", "Email m@n.com about the doors")
    context, page, base = signed_in(browser, site, authenticator=False, who=("alice", "alice-pass-1234"))
    try:
        page.goto(f"{base}/inbox/?thread={thread}")
        card = page.locator("[data-card]").first
        card.locator("button[name=action][value=approve]").click()
        expect(card.locator("[data-passkey-error]")).to_contain_text("add one under Passkeys", timeout=TIMEOUT)
    finally:
        context.close()
    with site.api() as api:
        [interrupt] = api.get("/api/interrupts/", params={"thread": thread}).json()["results"]
        assert interrupt["status"] == "pending"
