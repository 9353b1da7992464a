"""A decision says so in place, in real Chromium: "Approved · Undo" while the batch is held, then "sent".

One served app for the module, with COUNTERSIGN_UNDO_SECONDS=2.5 (the suite's default is 0):
a decision reads as words where its card stood, with Undo and the hold counting down; Undo
brings the card back and nothing reaches the agent; after the hold the agent gets exactly one
resume; after a key the focus stays on the result until j moves on; Esc leaves a field for its card; and of two
people deciding at once the loser is told who won, and it stays said through the live refreshes.
At 1440x900 and 390x844.
"""

import re
import time

import pytest
from playwright.sync_api import expect

from ..e2e.scripted_agent import APPROVAL_SCHEMA, finished, started
from ..loopback import LoopbackAgent, frame, stream
from ..servers import ServedApp
from .conftest import Reviewer, runs_settled
from .test_review import TIMEOUT, inbox_for, start

HOLD = 2.5
WIDE, PHONE = {"width": 1440, "height": 900}, {"width": 390, "height": 844}


class Asker(LoopbackAgent):
    """/one/ raises one confirmation, /two/ a batch of two; every body is kept, so a test counts the resumes."""

    def __init__(self):
        super().__init__()
        self.bodies: list[dict] = []

    def answer(self, handler, path, body):
        self.bodies.append(body)
        if body.get("resume"):
            return stream(handler, [frame(started(body)), frame(finished(body, {"type": "success"}))])
        count = 2 if path == "two" else 1
        stream(handler, [frame(started(body)), frame(finished(body, {"type": "interrupt", "interrupts": [
            {"id": f"step-{n}", "reason": "confirmation", "message": f"Step {n}?", "responseSchema": APPROVAL_SCHEMA}
            for n in range(count)]}))])

    def resumes(self, thread: str) -> list[dict]:
        return [b for b in list(self.bodies) if b["threadId"] == thread and b.get("resume")]


@pytest.fixture(scope="module")
def agent():
    found = Asker().start()
    yield found
    found.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory, agent):
    app = ServedApp(tmp_path_factory.mktemp("decide"), self_approving=True, colleague=True,
                    COUNTERSIGN_POLL_INTERVAL="0.2", COUNTERSIGN_UNDO_SECONDS=str(HOLD)).start()
    with app.api() as api:
        for name, path in (("solo", "one"), ("pair", "two")):
            assert api.post("/api/agents/", json={"name": name, "url": f"{agent.url}/{path}/"}).status_code == 201
    yield app
    app.stop()


@pytest.fixture(scope="module")
def people(browser, site):
    found = {"me": Reviewer(browser, site, "reviewer", "countersign"),
             "alice": Reviewer(browser, site, "alice", "alice-pass-1234")}
    yield found
    for person in found.values():
        person.close()


def sized(person, viewport):
    person.page.set_viewport_size(viewport)
    return person


def card_of(page, interrupt_id):
    return page.locator(f"[data-card][data-interrupt-id='{interrupt_id}']")


def line_of(page, interrupt_id):
    return page.locator(f"[data-testid=decided][data-interrupt-id='{interrupt_id}']")


def focused_id(page) -> str:
    return page.evaluate("document.activeElement.id")


def wait_for(check, what, timeout=TIMEOUT / 1000):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1440", "390"])
def test_keys_decide_in_place_show_the_result_then_move_on_and_the_agent_gets_one_resume(people, site, agent, viewport):
    me = sized(people["me"], viewport)
    thread = start(site, "pair")
    page = inbox_for(me, thread)
    first, second = card_of(page, "step-0"), card_of(page, "step-1")
    first.focus()
    page.keyboard.press("a")
    line = line_of(page, "step-0")
    expect(line.get_by_test_id("outcome")).to_have_text("Approved", timeout=TIMEOUT)
    expect(line.get_by_test_id("undo")).to_be_visible()
    expect(first).to_have_count(0)
    # The focus stays on what happened (its line, with Undo), not on a card the reader has not seen:
    # a deciding key does nothing there, and j moves on to the next card.
    assert focused_id(page) == line.get_attribute("id")
    page.keyboard.press("r")
    expect(second).to_be_visible()
    page.keyboard.press("j")
    assert focused_id(page) == second.get_attribute("id")
    page.keyboard.press("r")
    rejected = line_of(page, "step-1")
    expect(rejected.get_by_test_id("outcome")).to_have_text("Rejected", timeout=TIMEOUT)
    expect(page.locator("section.batch")).not_to_contain_text("resolved")
    # The batch is complete and held: each line offers Undo and counts the hold down.
    expect(rejected.get_by_test_id("hold")).to_contain_text(re.compile(r"sending to pair in (\d s|a moment)"))
    me.screenshot(f"decided-held-{viewport['width']}")
    assert agent.resumes(thread) == []
    # The hold ends: the agent has the batch's one resume, and the page says so where the cards stood.
    expect(rejected.get_by_test_id("sent")).to_have_text("sent to pair", timeout=TIMEOUT)
    expect(line.get_by_test_id("undo")).to_have_count(0)
    expect(page.get_by_test_id("resumed-run")).to_be_visible()
    [resume] = wait_for(lambda: agent.resumes(thread), "the resume reached the agent")
    assert [e["payload"] for e in resume["resume"]] == [{"approved": True}, {"approved": False}]
    expect(page.locator(".gone-note")).to_have_count(0)  # never "Decided elsewhere"
    me.screenshot(f"decided-sent-{viewport['width']}")


def test_undo_brings_the_card_back_and_nothing_reaches_the_agent(people, site, agent):
    me = sized(people["me"], PHONE)
    thread = start(site, "solo")
    page = inbox_for(me, thread)
    card = card_of(page, "step-0")
    card.locator("button[data-key=a]").click()
    line = line_of(page, "step-0")
    expect(line).to_contain_text("Approved")
    me.screenshot("decided-undo-390")
    line.get_by_test_id("undo").click()
    expect(card.locator("button[data-key=a]")).to_be_visible(timeout=TIMEOUT)
    expect(line).to_have_count(0)
    assert focused_id(page) == card.get_attribute("id")  # the card it brought back
    # Decided again (rejected): sent after its own hold, which ends after the undone approval's would
    # have. The agent gets that one resume, and never the approval.
    page.keyboard.press("r")
    expect(line.get_by_test_id("sent")).to_be_visible(timeout=TIMEOUT)
    [resume] = wait_for(lambda: agent.resumes(thread), "the resume reached the agent")
    assert resume["resume"][0]["payload"] == {"approved": False}
    runs_settled(site, thread)  # a second resume would be a run queued or streaming now
    assert len(agent.resumes(thread)) == 1


def test_esc_gives_a_field_s_focus_back_to_its_card(people, site):
    me = sized(people["me"], WIDE)
    thread = start(site, "mailer", "Email c@d.com about lunch")
    page = inbox_for(me, thread)
    card = page.locator("[data-card]").first
    interrupt_id = card.get_attribute("data-interrupt-id")
    card = card_of(page, interrupt_id)
    card.focus()
    page.keyboard.press("e")  # opens Edit & approve, in its first field
    assert page.evaluate("document.activeElement.closest('details[data-edit]') !== null")
    page.keyboard.press("Escape")
    assert focused_id(page) == card.get_attribute("id")
    card.locator("input[name=comment]").first.focus()
    page.keyboard.press("Escape")
    assert focused_id(page) == card.get_attribute("id")
    page.keyboard.press("d")  # the keys work again
    expect(line_of(page, interrupt_id).get_by_test_id("outcome")).to_have_text("Dismissed", timeout=TIMEOUT)


def test_of_two_people_deciding_at_once_the_loser_is_told_who_won_and_it_stays(people, site, agent):
    names = {"me": "Demo Reviewer", "alice": "Alice"}
    for trial, viewport in enumerate([WIDE, PHONE, WIDE]):
        me, alice = sized(people["me"], viewport), sized(people["alice"], viewport)
        thread = start(site, "solo")
        pages = {"me": inbox_for(me, thread), "alice": inbox_for(alice, thread)}
        pk = pages["me"].locator("[data-card]").first.get_attribute("id")
        # Clicked as soon as the page has the button: a live update (the other reviewer opening the same card)
        # may be swapping the card in at that moment, and a click on nothing is no decision.
        press = f"""() => new Promise((done, fail) => {{
            const until = performance.now() + 5000;
            const attempt = () => {{
                const button = document.querySelector('#{pk} button[data-key=a]');
                if (button) {{ button.click(); done(); }}
                else if (performance.now() > until) fail(new Error('no Approve button on the card'));
                else requestAnimationFrame(attempt);
            }};
            attempt();
        }})"""
        order = ["me", "alice"] if trial % 2 == 0 else ["alice", "me"]
        for who in order:  # as near to simultaneous as two pages go: neither waits for the other's answer
            pages[who].evaluate(press)
        won = {}
        for who, page in pages.items():
            line = line_of(page, "step-0")
            expect(line).to_be_visible(timeout=TIMEOUT)
            won[who] = page.get_by_test_id("conflict").count() == 0
        winner, loser = ([w for w in won if won[w]] or [None])[0], ([w for w in won if not won[w]] or [None])[0]
        assert winner and loser, f"trial {trial}: exactly one decision wins ({won})"
        lost = pages[loser]
        expect(lost.get_by_test_id("conflict")).to_have_text(f"Already decided by {names[winner]}: Approved")
        expect(lost.get_by_test_id("card-error")).to_contain_text(f"already decided by {names[winner]}")
        # The winner's hold ends and its resume is sent: every live refresh since kept the loser's news.
        expect(pages[winner].get_by_test_id("sent")).to_be_visible(timeout=TIMEOUT)
        expect(lost.get_by_test_id("conflict")).to_have_text(f"Already decided by {names[winner]}: Approved")
        expect(line_of(lost, "step-0")).to_contain_text(f"Decided by {names[winner]}: Approved")
        expect(lost.locator(".gone-note")).to_have_count(0)
        assert len(wait_for(lambda thread=thread: agent.resumes(thread), "the resume")) == 1


def test_after_the_last_decision_the_page_says_one_thing_and_the_badge_follows(people, site):
    me = sized(people["me"], WIDE)
    thread = start(site, "solo")
    page = inbox_for(me, thread)
    badge = page.locator("#pending-badge")
    before = int(badge.inner_text())
    assert before >= 1
    card_of(page, "step-0").locator("button[data-key=a]").click()
    line = line_of(page, "step-0")
    expect(line.get_by_test_id("outcome")).to_have_text("Approved", timeout=TIMEOUT)
    expect(badge).to_have_text(str(before - 1), timeout=TIMEOUT)
    expect(page.get_by_test_id("inbox-count")).to_have_text("0", timeout=TIMEOUT)
    # The decision's line (its undo, then its receipt) stands where the card was; "nothing waits" is not
    # said beside it, through the list's reads as the batch is held and then sent.
    expect(line.get_by_test_id("sent")).to_be_visible(timeout=TIMEOUT)
    assert me.reads() >= 1 and page.get_by_test_id("inbox-empty").count() == 1
    expect(page.get_by_test_id("inbox-empty")).to_be_hidden()
    expect(line).to_be_visible()
    # Once the page is opened again, nothing is left, and it says so.
    page = me.open(f"/inbox/?thread={thread}")
    expect(page.get_by_test_id("inbox-empty")).to_be_visible()
