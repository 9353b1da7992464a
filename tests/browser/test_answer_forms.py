"""A card's forms in real Chromium, at 1440x900 and 390x844: answer forms open valid and honest, the one comment
box goes with whichever action sends (and survives a refusal), Edit & approve edits each argument as a field with
a word diff, and the plain Approve cannot approve unedited arguments under pending edits.

One served app and one logged-in reviewer for the module (each width re-sizes the page); the demo agents'
threads that are only looked at are started once.
"""

import re

import pytest
from playwright.sync_api import expect

from .conftest import Reviewer, axe_check, no_sideways_scroll, settled
from .test_review import TIMEOUT, start

# What a page looks like (its layout, contrast, axe's findings, its forms) is the same on either back end:
# `make test` checks it on SQLite, and `make test-scale` leaves it out (``backend_free``).
pytestmark = pytest.mark.backend_free

WIDTHS = {1440: 900, 390: 844}
SHOWN_ERRORS = "[data-card] .errmsg:visible"


@pytest.fixture(scope="module")
def person(browser, site):
    reviewer = Reviewer(browser, site, "reviewer", "countersign")
    yield reviewer
    reviewer.close()


@pytest.fixture(scope="module")
def looked_at(site):
    """Threads whose cards are only looked at (and typed into, never sent)."""
    return {agent: start(site, agent) for agent in ("filing", "deployer", "planner")}


@pytest.fixture(params=list(WIDTHS), ids=lambda width: f"{width}px")
def page(request, person):
    person.page.set_viewport_size({"width": request.param, "height": WIDTHS[request.param]})
    return person.page


def open_card(person, thread, interrupt_id=None):
    page = person.open(f"/inbox/?thread={thread}")
    cards = page.locator(f"[data-card][data-interrupt-id='{interrupt_id}']" if interrupt_id else "[data-card]")
    expect(cards.first).to_be_visible(timeout=TIMEOUT)
    # Built: json-editor draws the form on a later frame.
    expect(cards.first.locator(".schema-editor.je-ready, .edit-editor.je-ready, form.actions:not([data-schema-form])")
           .first).to_be_attached(timeout=TIMEOUT)
    return cards.first


def decisions_of(site, thread):
    with site.api() as api:
        [asked] = api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]
        return api.get(f"/api/interrupts/{asked['id']}/").json()["decisions"]


def key_hint(button, key):
    expect(button.locator("kbd")).to_have_text(key)
    expect(button.locator("kbd")).to_be_visible()


def test_forms_open_valid_with_nothing_invented_and_say_errors_once_touched(person, page, looked_at, site):
    card = open_card(person, looked_at["filing"])
    # Human labels, empty fields, no choice made for the reviewer, and no error before anything is typed.
    form = card.locator(".schema-editor")
    for label in ("Quarter", "Year", "Revenue"):
        expect(form.get_by_label(label, exact=True)).to_be_visible()
    expect(form.get_by_label("Year", exact=True)).to_have_value("")
    expect(form.get_by_label("Revenue", exact=True)).to_have_value("")
    expect(form.get_by_label("Quarter", exact=True)).to_have_value("_placeholder_")
    expect(page.locator(SHOWN_ERRORS)).to_have_count(0)
    send = card.get_by_role("button", name="Send answer")
    key_hint(send, "a")
    # A form has no yes/no: its Reject tells the agent no the only way it can (cancelled).
    key_hint(card.get_by_role("button", name="Reject"), "r")
    expect(card.get_by_role("button", name="Dismiss")).to_have_count(0)
    no_sideways_scroll(page)
    # Touched: only that field says what is wrong.
    year = form.get_by_label("Year", exact=True)
    year.fill("1999")
    year.press("Tab")
    expect(page.locator(SHOWN_ERRORS)).to_have_text(["Enter 2000 or more."])
    expect(year).to_have_attribute("aria-invalid", "true")
    # Sent: every field that is wrong says so, and nothing is sent.
    send.click()
    # The fields' order is the schema's as stored: PostgreSQL's jsonb keeps object keys in its own order.
    expect(page.locator(SHOWN_ERRORS)).to_have_count(3)
    assert sorted(page.locator(SHOWN_ERRORS).all_inner_texts()) == [
        "Enter 2000 or more.",
        "Required.",
        "Required.",
    ]
    # The first invalid field, in jsonb's key order on PostgreSQL.
    expect(form.locator("[aria-invalid=true]:focus")).to_have_count(1)
    axe_check(page, "filing-form-errors", within=f"#{card.get_attribute('id')}")
    assert decisions_of(site, looked_at["filing"]) == []

    # The deployer asks "Deploy build 42?": Approve, with the build it asked about, and no error.
    card = open_card(person, looked_at["deployer"])
    approve = card.get_by_role("button", name="Approve")
    key_hint(approve, "a")
    key_hint(card.get_by_role("button", name="Reject"), "r")  # every request can be refused
    expect(card.get_by_label("Build", exact=True)).to_have_value("42")
    expect(card.get_by_test_id("prefilled")).to_be_visible()
    expect(page.locator(SHOWN_ERRORS)).to_have_count(0)

    # The planner: the date is empty and quiet; the yes/no card shows its keys.
    date = open_card(person, looked_at["planner"], "confirm-date")
    expect(date.get_by_label("Date", exact=True)).to_have_value("")
    expect(page.locator(SHOWN_ERRORS)).to_have_count(0)
    budget = page.locator("[data-card][data-interrupt-id='approve-budget']")
    key_hint(budget.get_by_role("button", name="Yes"), "a")
    key_hint(budget.get_by_role("button", name="No"), "r")
    no_sideways_scroll(page)


def test_a_comment_goes_with_a_form_answer_and_survives_a_refusal(person, browser, site):
    page = person.page
    page.set_viewport_size({"width": 1440, "height": 900})
    thread = start(site, "deployer")
    card = open_card(person, thread)
    card.get_by_label("Build", exact=True).fill("43")
    card.get_by_label(re.compile("^Comment")).fill("43 has the fix")
    # A colleague claims the card meanwhile: the answer is refused, and nothing typed is lost.
    alice = Reviewer(browser, site, "alice", "alice-pass-1234")
    try:
        theirs = alice.open(f"/inbox/?thread={thread}").get_by_test_id("claim-button")
        theirs.click()
        expect(alice.page.get_by_test_id("claim")).to_contain_text("You", timeout=TIMEOUT)
    finally:
        alice.close()
    card.get_by_role("button", name="Approve").click()
    expect(card.get_by_test_id("card-error")).to_contain_text("Alice", timeout=TIMEOUT)
    expect(card.get_by_label(re.compile("^Comment"))).to_have_value("43 has the fix")
    expect(card.get_by_label("Build", exact=True)).to_have_value("43")
    card.get_by_test_id("confirm-claim").check()
    # The key sends it: `a` presses the form's Approve.
    card.focus()
    page.keyboard.press("a")
    expect(card).to_have_count(0, timeout=TIMEOUT)
    [decision] = decisions_of(site, thread)
    assert (decision["action"], decision["payload"], decision["comment"]) == (
        "respond", {"build": 43}, "43 has the fix")


def test_edit_and_approve_by_field_with_a_word_diff_and_no_unedited_approve(person, page, site):
    thread = start(site, "mailer", "Email c@d.com about lunch")
    card = open_card(person, thread)
    summary = card.locator("details[data-edit] > summary")
    key_hint(summary, "e")
    key_hint(card.get_by_role("button", name="Approve"), "a")
    key_hint(card.get_by_role("button", name="Reject"), "r")
    key_hint(card.get_by_role("button", name="Dismiss"), "d")
    summary.click()
    editor = card.locator(".edit-editor")
    to, body = editor.get_by_label("To", exact=True), editor.get_by_label("Body", exact=True)
    expect(to).to_be_focused()  # opening it puts the cursor in its first field
    expect(to).to_have_value("c@d.com")
    expect(editor.get_by_label("Subject", exact=True)).to_be_visible()
    expect(card.locator("textarea[name=edited_args]")).to_be_hidden()
    approve = card.locator("form.actions").get_by_role("button", name="Approve")
    expect(approve).to_be_enabled()

    body.fill("Email c@d.com about dinner at <b>eight</b>")
    expect(approve).to_be_disabled()  # at the first keystroke
    expect(card.locator("[data-edits-pending]")).to_be_visible()
    card.focus()
    page.keyboard.press("a")  # nothing to press: the unedited args are not approved
    card.get_by_role("button", name="Review changes").click()
    diff = card.get_by_test_id("word-diff")
    expect(diff).to_be_visible(timeout=TIMEOUT)
    row = diff.locator(".diff-row")
    expect(row).to_have_count(1)
    expect(row.locator("dt")).to_contain_text("body")
    expect(row.locator("del")).to_have_text("removed: lunch")
    expect(row.locator("ins")).to_have_text("added: dinner at <b>eight</b>")  # agent-shaped text stays text
    expect(diff).to_contain_text("unchanged: to, subject")
    expect(approve).to_be_disabled()
    card.focus()
    posted = []
    page.on("request", lambda request: posted.append(request.url) if request.method == "POST" else None)
    page.keyboard.press("a")
    settled(page)  # the key's handler has run: a decision would have been posted from it
    assert posted == [] and decisions_of(site, thread) == []
    no_sideways_scroll(page)
    # Changed again: the preview of the old edits is gone, so its button cannot send them.
    body.fill("Email c@d.com about dinner at eight")
    expect(card.get_by_test_id("edit-diff")).to_have_count(0)
    # Discarded: back to the proposal, Approve works again.
    card.get_by_role("button", name="Discard edits").click()
    expect(approve).to_be_enabled()
    summary.click()
    body.fill("Email c@d.com about dinner")
    card.get_by_role("button", name="Review changes").click()
    expect(card.get_by_test_id("word-diff")).to_be_visible(timeout=TIMEOUT)
    card.get_by_label(re.compile("^Comment")).fill("dinner, not lunch")
    card.get_by_role("button", name="Approve with these edits").click()
    expect(card).to_have_count(0, timeout=TIMEOUT)
    [decision] = decisions_of(site, thread)
    assert decision["action"] == "edit" and decision["comment"] == "dinner, not lunch"
    assert decision["edited_args"] == {"to": "c@d.com", "subject": "Lunch", "body": "Email c@d.com about dinner"}
