"""Presence and claims in real Chromium, as two people with the inbox open: who has a card open is said while
they stay on it, through the live refreshes and the claim answers that replace the cards around them."""

import time

from playwright.sync_api import expect

from .conftest import INBOX_PAGE, live_read
from .test_review import TIMEOUT, start


def open_card(person, thread, where="agent=mailer"):
    page = person.open(f"/inbox/?{where}")
    card = page.locator(f"section.batch:has(a[href$='/threads/{thread}/']) [data-card]")
    expect(card).to_be_visible(timeout=TIMEOUT)
    return page, card


def test_a_reviewer_typing_in_a_card_stays_there_and_present_when_a_new_request_arrives(reviewer, alice, site):
    thread = start(site, "mailer", "Email c@d.com about lunch")
    theirs, their_card = open_card(alice, thread)
    mine, my_card = open_card(reviewer, thread)
    comment = my_card.locator("input[name=comment]")
    comment.click()
    mine.keyboard.type("looks")
    expect(their_card.get_by_test_id("viewers")).to_have_text("Open now: Demo Reviewer", timeout=TIMEOUT)
    # Another request: both inboxes refresh live, my batch is kept as it is and moved back into the list.
    start(site, "mailer", "Email e@f.com about dinner")
    expect(mine.locator("[data-card]")).to_have_count(2, timeout=TIMEOUT)
    # Without it the move blurred the field: what I type next went nowhere, and Alice was told I had left.
    expect(comment).to_be_focused()
    mine.keyboard.type(" fine")
    expect(comment).to_have_value("looks fine")
    # presence.js settles a focus change on a 200 ms timer queued by the move; a longer one queued now
    # runs after it, so once it resolves, presence.js has judged the focus and told the server.
    mine.evaluate("() => new Promise(done => setTimeout(done, 250))")
    expect(comment).to_be_focused()
    expect(their_card.get_by_test_id("viewers")).to_have_text("Open now: Demo Reviewer")
    # Closing the tab closes its socket: Alice sees nobody there.
    mine.close()
    expect(their_card.get_by_test_id("viewers")).to_have_text("", timeout=TIMEOUT)


def test_claim_and_select_with_the_keyboard_only(reviewer, alice, site):
    thread = start(site, "mailer", "Email g@h.com about the review")
    theirs, their_card = open_card(alice, thread)
    mine, my_card = open_card(reviewer, thread, f"thread={thread}")
    mine.keyboard.press("j")
    expect(my_card).to_be_focused()
    claim = my_card.get_by_test_id("claim-button")
    for _ in range(10):
        if claim.evaluate("button => button === document.activeElement"):
            break
        mine.keyboard.press("Tab")
    expect(claim).to_be_focused()
    mine.keyboard.press("Enter")
    expect(their_card.get_by_test_id("claim")).to_contain_text("Demo Reviewer is reviewing", timeout=TIMEOUT)
    expect(my_card.get_by_test_id("claim-button")).to_have_text("Release")
    # The answer replaced the batch around the button; the focus stays on the card, so the keys go on working.
    expect(my_card).to_be_focused()
    mine.keyboard.press("x")
    expect(mine.get_by_test_id("bulk-count")).to_have_text("1 selected.")
    expect(their_card.get_by_test_id("viewers")).to_have_text("Open now: Demo Reviewer", timeout=TIMEOUT)


def test_a_colleague_deciding_a_claimed_card_by_keyboard_is_asked_to_confirm_and_can(reviewer, alice, site):
    thread = start(site, "mailer", "Email i@j.com about the claim")
    theirs, their_card = open_card(alice, thread, f"thread={thread}")
    their_card.get_by_test_id("claim-button").click()
    expect(their_card.get_by_test_id("claim-button")).to_have_text("Release", timeout=TIMEOUT)
    mine, my_card = open_card(reviewer, thread, f"thread={thread}")
    expect(my_card.get_by_test_id("claim")).to_contain_text("Alice is reviewing")
    mine.keyboard.press("j")
    mine.keyboard.press("a")
    expect(my_card.get_by_test_id("card-error")).to_contain_text("Alice is reviewing", timeout=TIMEOUT)
    anyway = my_card.get_by_test_id("confirm-claim")
    anyway.focus()
    mine.keyboard.press("Space")
    expect(anyway).to_be_checked()
    # The key goes on meaning approve with the box focused: the reader need not leave it to confirm.
    mine.keyboard.press("a")
    expect(mine.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)


# The page's socket opens late, as on a slow network: whatever changed meanwhile must still show.
SLOW_SOCKET = """
const Real = window.WebSocket;
window.WebSocket = function (...args) {
  const self = this;
  self.readyState = 0;
  setTimeout(() => {
    const real = new Real(...args);
    for (const name of ["onopen", "onmessage", "onclose"]) real[name] = (event) => self[name] && self[name](event);
    self._real = real;
  }, 6000);
  self.send = (data) => self._real && self._real.send(data);
  Object.defineProperty(self, "readyState", { get: () => (self._real ? self._real.readyState : 0) });
};
window.WebSocket.OPEN = Real.OPEN;
"""


def test_a_request_raised_before_the_page_s_socket_opened_still_appears(reviewer, site):
    context = reviewer.context.browser.new_context(viewport={"width": 1280, "height": 900},
                                                   storage_state=reviewer.context.storage_state())
    try:
        context.add_init_script(SLOW_SOCKET)
        page = context.new_page()
        page.goto(f"{site.url}/inbox/?agent=janitor&scope=all")
        expect(page.get_by_test_id("inbox-count")).to_be_visible()
        before = page.locator("[data-card]").count()
        start(site, "janitor")  # raised while the page has no socket yet
        expect(page.locator("[data-card]")).to_have_count(before + 1, timeout=TIMEOUT)
    finally:
        context.close()


# The inbox socket's "attention" messages (presence) dropped in the page while ``window.__dropping``, as a
# socket reconnecting would miss them; every message heard is kept, for a failure to show. In the page, not
# through Playwright's WebSocket routing: a routed socket that never reached the server still opened the page's
# side (CI heard nothing on it, not even the counts the server sends first).
DROP_ATTENTION = """
const Real = window.WebSocket;
Object.assign(window, { __dropping: true, __dropped: [], __heard: [] });
window.WebSocket = class extends Real {
  constructor(...args) {
    super(...args);
    this.addEventListener("close", (event) => window.__heard.push(`closed ${event.code}`));
  }
  set onmessage(handler) {
    const inbox = this.url.includes("/ws/inbox/");
    super.onmessage = (event) => {
      if (!inbox) return handler(event);
      window.__heard.push(event.data);
      let attention = false;
      try { attention = JSON.parse(event.data).type === "attention"; } catch (e) {}
      if (window.__dropping && attention) window.__dropped.push(event.data);
      else handler(event);
    };
  }
  get onmessage() { return super.onmessage; }
};
"""


def test_who_has_a_card_open_is_read_again_into_the_card_being_worked_on(reviewer, alice, site):
    """A page that missed a presence message (a socket reconnecting) learns it from its next read of the
    list, on the card its reader is working in too, which that read otherwise keeps as it is."""
    thread = start(site, "mailer", "Email k@l.com about the agenda")

    def until_dropped(name: str) -> None:
        for _ in range(TIMEOUT // 100):
            if any(name in m for m in theirs.evaluate("window.__dropped")):
                return
            theirs.wait_for_timeout(100)
        raise AssertionError(f"no presence of {name} reached Alice's socket; it heard "
                             f"{theirs.evaluate('window.__heard')}")

    alice.page.add_init_script(DROP_ATTENTION)
    theirs, their_card = open_card(alice, thread, f"thread={thread}")
    their_card.focus()
    # Alice's own presence, told back to her socket: it is through to the server and listening.
    until_dropped("Alice")
    mine, my_card = open_card(reviewer, thread, f"thread={thread}")
    my_card.focus()
    until_dropped("Demo Reviewer")  # the reviewer's presence, told to Alice's socket and lost on the way
    theirs.evaluate("window.__dropping = false")
    expect(their_card).to_be_focused()
    reads = alice.reads()
    start(site, "mailer", "Email m@n.com about the minutes")  # a change: Alice's page reads its list again
    alice.read_again(reads)
    assert their_card.get_by_test_id("viewers").text_content() == "Open now: Demo Reviewer"
    expect(their_card).to_be_focused()


def test_a_read_asked_for_before_a_presence_message_does_not_undo_it(reviewer, alice, site):
    """The list's read answered after a presence message it predates: the card keeps what the message said."""
    thread = start(site, "mailer", "Email o@p.com about the offsite")
    theirs, their_card = open_card(alice, thread, f"thread={thread}")
    held = []

    def hold_the_answer(route):
        if live_read(route.request) and not held:
            held.append((route, route.fetch()))  # read by the server now, answered when released
        else:
            route.continue_()

    theirs.route(INBOX_PAGE, hold_the_answer)
    try:
        with theirs.expect_request(live_read):
            start(site, "mailer", "Email q@r.com about the quarter")
        mine, my_card = open_card(reviewer, thread, f"thread={thread}")
        my_card.focus()
        expect(their_card.get_by_test_id("viewers")).to_have_text("Open now: Demo Reviewer", timeout=TIMEOUT)
        assert held, "the read was not held"
        reads = alice.reads()
        route, answer = held[0]
        route.fulfill(response=answer)
        alice.read_again(reads)
        assert their_card.get_by_test_id("viewers").text_content() == "Open now: Demo Reviewer"
    finally:
        theirs.unroute(INBOX_PAGE)


def test_a_claim_answered_late_keeps_who_opened_the_card_since(reviewer, alice, site):
    thread = start(site, "mailer", "Email k@l.com about the late answer")
    theirs, their_card = open_card(alice, thread, f"thread={thread}")
    mine, my_card = open_card(reviewer, thread, f"thread={thread}")
    held = []
    # Alice's claim is taken and rendered now, but its answer reaches her page only when the test lets it.
    theirs.route("**/claim/", lambda route: held.append((route, route.fetch())))
    their_card.get_by_test_id("claim-button").click()
    deadline = time.monotonic() + TIMEOUT / 1000
    while not held:  # until the claim is answered: rendered before the reviewer opens the card
        assert time.monotonic() < deadline, "the claim was never answered"
        theirs.evaluate("() => new Promise(done => requestAnimationFrame(done))")
    [(route, answer)] = held
    expect(my_card.get_by_test_id("claim")).to_contain_text("Alice is reviewing", timeout=TIMEOUT)
    my_card.focus()
    expect(their_card.get_by_test_id("viewers")).to_have_text("Open now: Demo Reviewer", timeout=TIMEOUT)
    # Every state of the line from now on (a later read of the list would mend it, but too late).
    theirs.evaluate("""(id) => {
        window.__said = [];
        const note = () => { const line = document.querySelector(`#${id} [data-testid=viewers]`);
                             window.__said.push(line ? line.textContent : null); };
        new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true });
    }""", their_card.get_attribute("id"))
    route.fulfill(response=answer)
    expect(their_card.get_by_test_id("claim-button")).to_have_text("Release", timeout=TIMEOUT)
    expect(theirs.locator("section.batch.htmx-request")).to_have_count(0)
    # The answer, rendered before the reviewer opened the card, must never say nobody has it open.
    said = theirs.evaluate("() => window.__said")
    assert said and set(said) == {"Open now: Demo Reviewer"}, said
