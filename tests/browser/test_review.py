"""Reviewing in real Chromium: the inbox, the cards, the thread page, live across tabs and people."""

import json
import re

import pytest
from playwright.sync_api import expect

from ..e2e.scripted_agent import ScriptedAgent
from .conftest import press, settled

TIMEOUT = 15_000


def start(site, agent, message=None):
    with site.api() as api:
        response = api.post("/api/threads/", json={"agent": agent, **({"message": message} if message else {})})
        assert response.status_code == 201, response.text
        thread = response.json()["thread"]
        # Wait until its interrupts are recorded.
        for _ in range(200):
            if api.get("/api/interrupts/", params={"thread": thread}).json()["count"]:
                return thread
            import time
            time.sleep(0.05)
    raise AssertionError(f"{agent} raised no interrupt")


def inbox_for(person, thread):
    page = person.open(f"/inbox/?thread={thread}")
    expect(page.locator("[data-card]").first).to_be_visible(timeout=TIMEOUT)
    return page


def thread_page_shows_result(person, thread, text):
    page = person.open(f"/threads/{thread}/")
    expect(page.get_by_test_id("tool-result").last).to_contain_text(text, timeout=TIMEOUT)
    return page


def test_approve_the_mailer(reviewer, site):
    thread = start(site, "mailer", "Email c@d.com about lunch")
    page = inbox_for(reviewer, thread)
    card = page.locator("[data-card]").first
    # The args for people: a label per key, text as text; the exact JSON behind "as JSON".
    # (In the order the args are stored: PostgreSQL's jsonb keeps object keys in its own order.)
    args = card.get_by_test_id("args")
    expect(args.locator("dt")).to_have_count(3)
    assert dict(zip(args.locator("dt").all_inner_texts(), args.locator("dd").all_inner_texts(), strict=True)) == {
        "To": "c@d.com", "Subject": "Lunch", "Body": "Email c@d.com about lunch"}
    json_view = card.locator(".proposal details.as-json")
    expect(json_view.locator("pre")).to_be_hidden()
    json_view.locator("summary").click()
    expect(json_view.locator("pre")).to_contain_text('"to": "c@d.com"')
    reviewer.screenshot("inbox")
    card.get_by_role("button", name="Approve").click()
    expect(page.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    page = thread_page_shows_result(reviewer, thread, '"sent": true')
    reviewer.screenshot("thread")


def test_edit_and_approve_shows_a_diff_then_runs_the_edited_args(reviewer, site):
    thread = start(site, "mailer")
    page = inbox_for(reviewer, thread)
    card = page.locator("[data-card]").first
    card.get_by_text("Edit & approve").click()
    card.get_by_role(
        "button", name="Edit as JSON"
    ).click()  # (a field per argument: tests/browser/test_answer_forms.py)
    editor = card.locator("textarea[name=edited_args]")
    expect(editor).to_have_value(re.compile('"to": "a@b.com"'))
    editor.fill(json.dumps({"to": "not-an-address", "subject": "Hi", "body": "x"}))
    card.get_by_role("button", name="Review changes").click()
    expect(card.get_by_test_id("preview-error")).to_contain_text("/editedArgs/to", timeout=TIMEOUT)
    editor.fill(json.dumps({"to": "a@b.com", "subject": "Hi", "body": "Edited in the browser"}))
    card.get_by_role("button", name="Review changes").click()
    diff = card.get_by_test_id("edit-diff")
    expect(diff).to_contain_text("Edited in the browser", timeout=TIMEOUT)
    expect(diff.get_by_test_id("word-diff")).to_be_visible()
    card.get_by_role("button", name="Approve with these edits").click()
    expect(page.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    thread_page_shows_result(reviewer, thread, "Edited in the browser")


def test_the_filing_form_shows_a_field_error_before_it_sends(reviewer, site):
    thread = start(site, "filing")
    page = inbox_for(reviewer, thread)
    card = page.locator("[data-card]").first
    year = card.locator("input[name='root[year]']")
    year.fill("1999")
    card.locator("input[name='root[revenue]']").fill("4200000")
    card.get_by_role("button", name="Send answer").click()
    expect(card.locator(".errmsg").filter(has_text="2000").first).to_be_visible(timeout=TIMEOUT)
    with site.api() as api:  # nothing was sent
        assert api.get("/api/interrupts/", params={"thread": thread}).json()["count"] == 1
    card.locator("select[name='root[quarter]']").select_option("Q2")
    year.fill("2026")
    # Pressed as a hand presses it: the year's error clears as the field loses the focus to the
    # button, and the button must not move from under the pointer before it is let go.
    press(page, card.get_by_role("button", name="Send answer"))
    expect(page.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    page = reviewer.open(f"/threads/{thread}/")
    expect(page.locator(".bubble").last).to_contain_text("Filed Q2 2026", timeout=TIMEOUT)


def test_a_request_with_no_yes_or_no_is_rejected_and_the_record_says_so(reviewer, site):
    thread = start(site, "deployer")
    page = inbox_for(reviewer, thread)
    card = page.locator("[data-card]").first
    # The reason in words, the agent's own value kept in its title.
    expect(card.locator(".reason")).to_have_text("Deploy")
    expect(card.locator(".reason")).to_have_attribute("title", "reason: countersign:deploy")
    card.get_by_role("button", name="Reject").click()
    expect(page.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    page = reviewer.open(f"/threads/{thread}/")
    expect(page.locator(".bubble").last).to_contain_text("Left production alone.", timeout=TIMEOUT)
    page = reviewer.open(f"/threads/{thread}/audit/")
    expect(page.get_by_test_id("audit-row").first).to_contain_text("Rejected")


def test_the_planner_batch_shows_progress_and_resumes_after_the_second_decision(reviewer, site):
    thread = start(site, "planner")
    page = inbox_for(reviewer, thread)
    expect(page.get_by_test_id("batch-progress")).to_have_text("0 of 2 decided")
    budget = page.locator("[data-card][data-interrupt-id='approve-budget']")
    budget.get_by_role("button", name="Yes").click()
    expect(page.get_by_test_id("batch-progress")).to_have_text("1 of 2 decided", timeout=TIMEOUT)
    expect(page.locator(".decided")).to_contain_text("Demo Reviewer")
    date = page.locator("[data-card][data-interrupt-id='confirm-date']")
    date.locator("input[name='root[date]']").fill("2026-12-24")
    date.get_by_role("button", name="Send answer").click()
    expect(page.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    page = reviewer.open(f"/threads/{thread}/")
    expect(page.locator(".bubble").last).to_contain_text("Booked for 2026-12-24", timeout=TIMEOUT)


def test_a_card_decided_by_one_reviewer_leaves_the_others_inbox_live(reviewer, alice, site):
    thread = start(site, "janitor")
    theirs = inbox_for(alice, thread)
    mine = inbox_for(reviewer, thread)
    theirs.locator("[data-card]").first.get_by_role("button", name="Yes").click()
    expect(mine.locator("[data-card]")).to_have_count(0, timeout=TIMEOUT)
    expect(mine.get_by_test_id("inbox-count")).to_have_text("0", timeout=TIMEOUT)


def test_a_simultaneous_decision_is_told_who_decided_first(reviewer, alice, site):
    thread = start(site, "janitor")
    mine = inbox_for(reviewer, thread)
    theirs = inbox_for(alice, thread)
    # I am typing a comment: my card stays put while Alice decides.
    my_card = mine.locator("[data-card]").first
    my_card.locator("input[name=comment]").fill("looks fine")
    theirs.locator("[data-card]").first.get_by_role("button", name="Yes").click()
    expect(theirs.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    # My page hears it and says so above my card, which it keeps: the line moves my buttons, and a click
    # mid-move lands beside them (seen in CI), so I press once it is there.
    expect(mine.get_by_role("status").filter(has_text="Decided by Alice")).to_be_visible(timeout=TIMEOUT)
    my_card.get_by_role("button", name="Yes").click()
    expect(mine.get_by_test_id("card-error")).to_contain_text("already decided by Alice", timeout=TIMEOUT)


def test_start_from_the_thread_page_watch_live_approve_in_another_tab(reviewer, site):
    page = reviewer.open("/threads/")
    page.locator("select[name=agent]").select_option("mailer")
    page.locator("textarea[name=message]").fill("Email c@d.com about the launch")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/threads/thread-[0-9a-f]+/$"))
    thread = page.url.rstrip("/").rsplit("/", 1)[1]
    # The run's events arrive over the WebSocket: no reload.
    expect(page.locator(".run-end.outcome-interrupt")).to_be_visible(timeout=TIMEOUT)
    expect(page.locator(".tool-call")).to_contain_text("sendEmail")
    expect(page.get_by_role("button", name="Start run")).to_be_disabled(timeout=TIMEOUT)
    other = reviewer.context.new_page()
    other.goto(f"{site.url}/inbox/?thread={thread}")
    expect(other.locator("html[data-inbox-read]")).to_be_attached(timeout=TIMEOUT)  # live: see Reviewer.open
    other.locator("[data-card]").first.get_by_role("button", name="Approve").click()
    expect(other.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    expect(page.get_by_test_id("tool-result")).to_contain_text('"sent": true', timeout=TIMEOUT)
    expect(page.get_by_role("button", name="Start run")).to_be_enabled(timeout=TIMEOUT)
    assert page.url.endswith(f"/threads/{thread}/")


def test_keyboard_moves_between_cards_and_decides(reviewer, site):
    thread = start(site, "janitor")
    page = inbox_for(reviewer, thread)
    page.keyboard.press("j")
    expect(page.locator("[data-card]").first).to_be_focused()
    page.keyboard.press("a")
    expect(page.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    page.keyboard.press("?")
    expect(page.locator("#shortcuts")).to_be_visible()


@pytest.fixture(scope="module")
def evil_agent(site):
    agent = ScriptedAgent().start()
    with site.api() as api:
        assert api.post("/api/agents/", json={"name": "evil", "url": f"{agent.url}/evil/"}).status_code == 201
    yield agent
    agent.stop()


def test_agent_supplied_markup_is_shown_as_text_everywhere(reviewer, site, evil_agent):
    from ..e2e.scripted_agent import EVIL

    thread = start(site, "evil")
    for path in (f"/inbox/?thread={thread}", f"/threads/{thread}/", "/threads/"):
        page = reviewer.open(path)
        settled(page)  # an injected <img src=x onerror=...> would have failed and fired by now
        assert reviewer.dialogs == [], path
        assert page.locator("img[src=x]").count() == 0, path
    page = reviewer.open(f"/inbox/?thread={thread}")
    expect(page.locator("[data-card]").first).to_contain_text(EVIL)
    with site.api() as api:
        [asked] = api.get("/api/interrupts/", params={"thread": thread}).json()["results"]
        api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "cancel"})
    page = reviewer.open("/audit/")
    settled(page)
    assert reviewer.dialogs == [] and page.locator("img[src=x]").count() == 0


def test_dropped_messages_and_a_reconnect_lose_and_repeat_no_event(reviewer, site):
    """The WebSocket may drop messages (the channel layer does under bursts): the page reads the log."""
    with site.api() as api:
        thread = api.post("/api/threads/", json={"agent": "janitor"}).json()["thread"]
    page = reviewer.page
    dropped = []
    sockets = []

    def relay_dropping(ws):
        server = ws.connect_to_server()
        sockets.append(ws)

        def from_server(message):
            data = json.loads(message)
            # Keep the greeting; drop every event poke but one in three.
            if data.get("type") == "event" and data["seq"] % 3:
                dropped.append(data["seq"])
                return
            ws.send(message)

        server.on_message(from_server)
        ws.on_message(lambda message: server.send(message))

    page.route_web_socket(re.compile(r".*/ws/threads/.*"), relay_dropping)
    reviewer.open(f"/threads/{thread}/")
    expect(page.locator(".run-end.outcome-interrupt")).to_be_visible(timeout=TIMEOUT)
    with site.api() as api:
        [asked] = api.get("/api/interrupts/", params={"thread": thread}).json()["results"]
        assert api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "approve"}).status_code == 201
    expect(page.locator(".run-end")).to_have_count(2, timeout=TIMEOUT)
    # Drop the connection and run again meanwhile: the page reconnects and reads what it missed.
    sockets[-1].close()
    with site.api() as api:
        assert api.post(f"/api/threads/{thread}/runs/", json={"message": "once more"}).status_code == 201
    for _ in range(100):  # it reconnects, with backoff
        if len(sockets) >= 2:
            break
        page.wait_for_timeout(100)
    assert len(sockets) >= 2
    expect(page.locator(".run-end")).to_have_count(3, timeout=TIMEOUT)
    expect(page.locator("[data-live-status]")).to_have_text("live")
    with site.api() as api:
        log = api.get(f"/api/threads/{thread}/events/").json()["events"]
    shown = page.locator("[data-seq]").evaluate_all("els => els.map(e => e.dataset.seq)")
    numbered = [int(seq) for seq in shown if seq.isdigit()]
    folded = {"TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "TOOL_CALL_ARGS", "TOOL_CALL_END"}
    expected = [e["seq"] for e in log if e["type"] not in folded]
    assert dropped, "the test must really drop messages"
    assert numbered == expected  # every event once, in order


def test_a_decision_the_server_is_too_busy_for_is_said_and_pressed_again(reviewer, site):
    """A 503 (the database busy) answered to a press is said on the card and pressed again after its
    Retry-After; before, htmx dropped it and the reader saw nothing happen."""
    thread = start(site, "janitor")
    page = inbox_for(reviewer, thread)
    card = page.locator("[data-card]").first
    turned_away = []

    def busy_once(route):
        if not turned_away and route.request.method == "POST":
            turned_away.append(route.request.url)
            route.fulfill(status=503, headers={"Retry-After": "1"}, content_type="text/html", body="<p>Busy</p>")
        else:
            route.continue_()

    decide = re.compile(r".*/interrupts/\d+/decide/$")
    page.route(decide, busy_once)
    try:
        card.get_by_role("button", name="Yes").click()
        expect(card.get_by_test_id("request-failed")).to_have_text(
            "The server is busy, so nothing was done yet: trying again in 1 s.")
        expect(page.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)
    finally:
        page.unroute(decide)
    assert len(turned_away) == 1
    with site.api() as api:
        [asked] = api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]
        taken = api.get(f"/api/interrupts/{asked['id']}/").json()["decisions"]
    assert [d["action"] for d in taken] == ["approve"], taken
