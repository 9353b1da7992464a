"""The inbox as a triage tool, in real Chromium: a list of one line per request beside the cards at 1440x900
(eight or more in sight), a phone's first request with its buttons in sight, a whole triage by keyboard
alone, and new arrivals marked at the top of the list. Light and dark, axe on each."""

import re

import pytest
from playwright.sync_api import expect

from ..servers import ServedApp
from .conftest import Reviewer, axe_check, no_sideways_scroll, shoot
from .test_review import TIMEOUT, start

WIDE, PHONE = {"width": 1440, "height": 900}, {"width": 390, "height": 844}
# Eleven requests of four kinds: tool calls (three in a batch), a deploy to approve, a yes/no question.
MIX = [("bulk-mailer", None), ("mailer", "Email ann@example.com about the launch"),
       ("deployer", "Deploy build 812 to staging"), ("janitor", None), ("bulk-mailer", None),
       ("mailer", "Email bo@example.com about the invoice"), ("deployer", "Deploy build 813 to production")]
REQUESTS = 11

IN_SIGHT = """() => [...document.querySelectorAll(SELECTOR)].filter((element) => {
    const box = element.getBoundingClientRect();
    const outside = box.top < 0 || box.bottom > innerHeight || box.left < 0 || box.right > innerWidth;
    if (box.height === 0 || outside) return false;
    const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    return hit !== null && element.contains(hit);
}).length"""


def in_sight(page, selector: str) -> int:
    """How many elements matching ``selector`` are wholly inside the window and not covered, as scrolled now."""
    return page.evaluate(IN_SIGHT.replace("SELECTOR", repr(selector)))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    # Decisions held 30 s before they are sent: time enough to undo any of them, alone or in bulk.
    app = ServedApp(tmp_path_factory.mktemp("triage"), self_approving=True, colleague=True,
                    COUNTERSIGN_POLL_INTERVAL="0.2", COUNTERSIGN_UNDO_SECONDS="30").start()
    yield app
    app.stop()


@pytest.fixture(scope="module")
def threads(site):
    return [start(site, agent, message) for agent, message in MIX]


def person(browser, site, viewport, scheme="light"):
    return Reviewer(browser, site, "reviewer", "countersign", view="one", viewport=viewport, color_scheme=scheme)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_at_1440_the_list_shows_eight_requests_or_more_one_line_each(browser, site, threads, scheme):
    me = person(browser, site, WIDE, scheme)
    try:
        page = me.open("/inbox/")
        rows = page.get_by_test_id("row")
        expect(rows).to_have_count(REQUESTS, timeout=TIMEOUT)
        assert in_sight(page, "[data-testid=row]") >= 8
        # One line each: no row taller than a line and its padding, however long what it asks.
        heights = rows.evaluate_all("rows => rows.map((row) => row.getBoundingClientRect().height)")
        assert max(heights) < 40, heights
        shoot(page, f"triage-{scheme}", full_page=False)
        # Beside the cards: the list and the first card share the screen.
        first_card = page.locator("[data-card]").first
        assert rows.first.bounding_box()["x"] + rows.first.bounding_box()["width"] <= first_card.bounding_box()["x"]
        expect(rows.filter(has_text="deployer").first).to_contain_text("Deploy build 812 to staging")
        # One request at a time beside the list (the default), or every card stacked, as the reader picks.
        expect(page.locator("[data-card]:visible")).to_have_count(1)
        toggle = page.get_by_test_id("view-toggle")
        toggle.click()
        expect(page.locator("[data-card]:visible")).to_have_count(REQUESTS)
        expect(toggle).to_have_text("Show one at a time")
        toggle.click()
        expect(page.locator("[data-card]:visible")).to_have_count(1)
        no_sideways_scroll(page)
        axe_check(page, f"triage list, {scheme}")
        shoot(page, f"triage-{scheme}", full_page=False)
    finally:
        me.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_at_390_the_first_request_s_buttons_show_without_scrolling(browser, site, threads, scheme):
    me = person(browser, site, PHONE, scheme)
    try:
        page = me.open("/inbox/")
        first = page.locator("[data-card]").first
        expect(first).to_be_visible(timeout=TIMEOUT)
        # List, then request: the first request opens with its buttons in sight; the list is a screen of its own.
        triage = page.get_by_test_id("triage")
        expect(triage).to_be_hidden()
        expect(page.locator("[data-card]:visible")).to_have_count(1)
        assert in_sight(page, "[data-card] form.actions .buttons button") >= 2
        expect(first.locator(".buttons")).to_be_in_viewport()
        expect(page.locator("[data-position]")).to_have_text(re.compile(r"^Request 1 of \d+$"))
        # The header is one compact band, not a fifth of the screen.
        assert page.locator("header.topbar").bounding_box()["height"] <= 120
        no_sideways_scroll(page)
        shoot(page, f"triage-{scheme}", full_page=False)
        axe_check(page, f"triage on a phone, {scheme}")
        page.get_by_test_id("list-open").click()
        rows = page.get_by_test_id("row")
        expect(triage).to_be_visible()
        expect(page.locator("[data-card]:visible")).to_have_count(0)
        expect(rows.first).to_be_focused()
        shoot(page, f"triage-list-{scheme}", full_page=False)
        assert in_sight(page, "[data-testid=row]") >= 6
        no_sideways_scroll(page)
        axe_check(page, f"the request list on a phone, {scheme}")
        second = rows.nth(1)
        second_id = second.get_attribute("data-row-for")
        second_card = page.locator(f"#{second_id}")
        second.click()
        expect(triage).to_be_hidden()
        expect(second_card).to_be_visible()
        expect(second_card).to_be_focused()
        expect(page.locator("[data-position]")).to_have_text(re.compile(r"^Request 2 of \d+$"))
        expect(second_card.locator(".buttons")).to_be_in_viewport()
        # Decided: the line where the card was, and the receipt with Undo, clear of everything else.
        # Named before the click: once decided, the card is gone (read after it, a fast answer left nothing to read).
        line = page.locator(f"#{second_id.replace('interrupt-', 'decided-')}")
        second_card.get_by_role("button", name="Reject").click()
        expect(line.get_by_test_id("outcome")).to_have_text("Rejected", timeout=TIMEOUT)
        toast = page.get_by_test_id("toast")
        expect(toast).to_be_in_viewport()
        axe_check(page, f"a decision's receipt on a phone, {scheme}")
        toast.get_by_test_id("toast-undo").click()
        expect(second_card).to_be_visible(timeout=TIMEOUT)
        expect(toast).to_have_count(0)
        # A request longer than the screen keeps its buttons at the screen's foot.
        page.set_viewport_size({"width": 390, "height": 420})
        second_card.evaluate("card => card.scrollIntoView({block: 'start'})")
        assert second_card.bounding_box()["height"] > 420
        expect(second_card.locator(".buttons")).to_be_in_viewport()
    finally:
        me.close()


def test_filters_show_as_chips_that_remove_themselves(browser, site, threads):
    me = person(browser, site, WIDE)
    try:
        page = me.open("/inbox/")
        rows = page.get_by_test_id("row")
        expect(rows).to_have_count(REQUESTS, timeout=TIMEOUT)
        page.get_by_test_id("filters").locator("summary").click()
        page.get_by_role("combobox", name="Agent").select_option("deployer")
        chip = page.get_by_test_id("chip")
        expect(chip).to_have_text("Agent: deployer ×", timeout=TIMEOUT)
        expect(rows).to_have_count(2)
        expect(page).to_have_url(re.compile(r"agent=deployer"))
        # The thread is picked from those listed, not typed.
        thread = page.get_by_role("combobox", name="Thread")
        expect(thread.locator("option")).to_have_count(len(threads) + 1)  # and "any"
        thread.select_option(threads[2])  # the first deployer's
        expect(chip).to_have_count(2, timeout=TIMEOUT)
        expect(rows).to_have_count(1)
        axe_check(page, "filters as chips")
        chip.filter(has_text="Agent").click()
        expect(chip).to_have_count(1, timeout=TIMEOUT)
        expect(page).not_to_have_url(re.compile(r"agent="))
        expect(page.get_by_role("combobox", name="Agent")).to_have_value("")
        page.get_by_test_id("chip").click()
        expect(chip).to_have_count(0, timeout=TIMEOUT)
        expect(rows).to_have_count(REQUESTS)
    finally:
        me.close()


def test_a_bulk_decision_comes_with_a_receipt_and_one_undo(browser, site, threads):
    me = person(browser, site, WIDE)
    try:
        page = me.open("/inbox/")
        cards = page.locator("[data-card]")
        total = len(threads) + 4  # the bulk-mailer's runs ask three each
        expect(cards).to_have_count(total, timeout=TIMEOUT)
        # The first batch's three cards, one at a time: open each with j, select it with x.
        for _ in range(3):
            page.keyboard.press("j")
            page.keyboard.press("x")
        expect(page.get_by_test_id("bulk-count")).to_have_text("3 selected.")
        page.get_by_role("button", name="Approve selected").click()
        toast = page.get_by_test_id("bulk-result")
        expect(toast.get_by_test_id("bulk-summary")).to_have_text("3 approved", timeout=TIMEOUT)
        receipt = toast.get_by_test_id("bulk-receipt").locator("li")
        expect(receipt).to_have_count(3)
        expect(receipt.first).to_contain_text("Approved · bulk-mailer:")
        expect(cards).to_have_count(total - 3, timeout=TIMEOUT)
        axe_check(page, "a bulk decision's receipt")
        toast.get_by_test_id("bulk-undo").click()
        expect(toast.get_by_test_id("bulk-summary")).to_have_text("3 undone: they wait for a decision again",
                                                                  timeout=TIMEOUT)
        expect(cards).to_have_count(total, timeout=TIMEOUT)
        toast.get_by_role("button", name="Close this summary").click()
        expect(toast).to_be_hidden()
        with site.api() as api:
            assert api.get("/api/interrupts/", params={"status": "pending"}).json()["count"] == total
    finally:
        me.close()


def test_a_request_arriving_is_marked_new_at_the_top_of_the_list(browser, site, threads):
    me = person(browser, site, WIDE)
    try:
        page = me.open("/inbox/")
        expect(page.get_by_test_id("row")).to_have_count(REQUESTS, timeout=TIMEOUT)
        marker = page.get_by_test_id("new-marker")
        expect(marker).to_be_hidden()
        threads.append(start(site, "janitor", "Clear the build cache"))
        expect(marker).to_have_text("1 new request: open it", timeout=TIMEOUT)
        arrived = page.locator("[data-row-for].new")
        expect(arrived).to_contain_text("new")
        card_id = arrived.get_attribute("data-row-for")
        marker.click()
        expect(page.locator(f"#{card_id}")).to_be_focused()
        expect(marker).to_be_hidden()
        expect(page.locator(f"[data-row-for='{card_id}']")).to_have_attribute("aria-current", "true")
        expect(page.locator("[data-row-for].new")).to_have_count(0)
    finally:
        me.close()


def test_a_folded_request_opens_whole_and_a_live_read_leaves_it_whole(browser, site, threads):
    me = person(browser, site, WIDE)
    try:
        page = me.open("/inbox/")
        rows = page.get_by_test_id("row")
        expect(rows.first).to_be_visible(timeout=TIMEOUT)
        # One request shows at a time: the server renders the others folded to their titles.
        expect(page.locator("[data-card][data-folded]").first).to_be_attached()
        last = rows.last.get_attribute("data-row-for")
        assert page.locator(f"#{last}[data-folded]").count() == 1
        # Its batch's read held until the folded card has the focus: the whole one takes it over when it comes.
        held = []
        batch_read = re.compile(r"/interrupts/\d+/undo/$")
        page.route(batch_read, lambda route: held.append(route))
        with page.expect_request(batch_read):
            rows.last.click()
        card = page.locator(f"#{last}")
        expect(card).to_be_focused(timeout=TIMEOUT)
        expect(card).to_have_attribute("data-folded", "")
        for route in held:
            route.continue_()
        page.unroute(batch_read)
        expect(card).not_to_have_attribute("data-folded", "", timeout=TIMEOUT)
        expect(card).to_be_focused()
        expect(card.locator("[data-key=a], [data-key=r]").first).to_be_visible()
        card.evaluate("card => { card.dataset.sameElement = 'yes'; }")
        # The list read again (a request arrives) renders that batch folded: the whole one stays, as it was.
        threads.append(start(site, "janitor", "Clear the staging cache"))
        expect(page.get_by_test_id("new-marker")).to_be_visible(timeout=TIMEOUT)
        expect(card).to_have_attribute("data-same-element", "yes")
        expect(card).not_to_have_attribute("data-folded", "")
        expect(card).to_be_visible()
    finally:
        me.close()


def test_a_live_read_leaves_the_reader_on_the_row_they_were_on(browser, site, threads):
    me = person(browser, site, WIDE)
    try:
        page = me.open("/inbox/")
        rows = page.get_by_test_id("row")
        expect(rows.nth(1)).to_be_visible(timeout=TIMEOUT)
        rows.nth(1).focus()
        on = rows.nth(1).get_attribute("data-row-for")
        # A request arrives: the list is read again (its row is marked new) and every row is new markup.
        threads.append(start(site, "mailer", "Email di@example.com about the review"))
        expect(page.get_by_test_id("new-marker")).to_be_visible(timeout=TIMEOUT)
        expect(page.locator(f"[data-row-for='{on}']")).to_be_focused()
        page.keyboard.press("ArrowDown")
        expect(page.locator("[data-row-for]:focus")).not_to_have_attribute("data-row-for", on)
    finally:
        me.close()


def test_the_thread_page_decides_its_requests_with_the_inbox_s_cards(browser, site, threads):
    thread = start(site, "mailer", "Email cy@example.com about the offsite")
    me = person(browser, site, WIDE)
    try:
        page = me.open(f"/threads/{thread}/")
        here = page.get_by_test_id("decide-here")
        card = here.locator("[data-card]")
        expect(card).to_have_count(1, timeout=TIMEOUT)
        expect(card.get_by_test_id("args")).to_contain_text("cy@example.com")
        expect(card.locator(".bulk-pick")).to_be_hidden()  # no bulk decisions here
        expect(page.locator("[data-blocked-reason]")).to_contain_text("Answer them above")
        axe_check(page, "a thread page with a request to decide")
        card.get_by_role("button", name="Approve").click()
        line = here.get_by_test_id("decided")
        expect(line.get_by_test_id("outcome")).to_have_text("Approved", timeout=TIMEOUT)
        expect(line.get_by_test_id("undo")).to_be_visible()
        # The page says one thing: the decision just taken, not also that nothing is waiting.
        expect(here.get_by_test_id("inbox-empty")).to_be_attached(timeout=TIMEOUT)  # read again: none left
        expect(here.get_by_test_id("inbox-empty")).to_be_hidden()
        # The receipt at the foot of the screen says what was decided, in the line's words, with Undo.
        toast = page.get_by_test_id("toast")
        asked = line.locator(".what").evaluate("p => p.firstChild.textContent.trim()")
        expect(toast).to_contain_text(f"Approved: {asked}")
        axe_check(page, "a decision's receipt")
        shoot(page, "receipt", full_page=False)
        toast.get_by_test_id("toast-undo").click()
        expect(card).to_have_count(1, timeout=TIMEOUT)
        expect(toast).to_have_count(0)
        card.get_by_role("button", name="Approve").click()
        expect(line.get_by_test_id("outcome")).to_have_text("Approved", timeout=TIMEOUT)
        expect(toast).to_be_visible()
        toast.get_by_role("button", name="Close this receipt").click()
        expect(toast).to_have_count(0)
        with site.api() as api:
            [asked] = api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]
            assert asked["status"] == "resolved"
    finally:
        me.close()


def focused(page) -> str:
    return page.evaluate("document.activeElement.id")


def current_row(page) -> str:
    return page.locator("[data-row-for][aria-current]").get_attribute("data-row-for")


def test_a_whole_triage_by_keyboard_only(browser, site, threads):
    me = person(browser, site, WIDE)
    try:
        page = me.open("/inbox/")
        cards = page.locator("[data-card]")
        expect(cards).to_have_count(len(threads) + 4, timeout=TIMEOUT)  # the bulk-mailer's runs ask three each
        total = cards.count()
        # Into the list past the page's tools, along it with the arrows, and Enter opens the request.
        page.keyboard.press("Tab")
        expect(page.get_by_test_id("skip-to-cards")).to_be_focused()
        page.keyboard.press("Enter")
        page.keyboard.press("Tab")
        rows = page.locator("[data-row-for]")
        expect(rows.first).to_be_focused()
        page.keyboard.press("ArrowDown")
        expect(rows.nth(1)).to_be_focused()
        second = rows.nth(1).get_attribute("data-row-for")
        page.keyboard.press("Enter")
        assert focused(page) == second == current_row(page)
        # From a card, j/k and the arrows go from card to card; the list marks the one the reader is on.
        first = cards.nth(0).get_attribute("id")
        page.keyboard.press("k")
        assert focused(page) == first == current_row(page)
        page.keyboard.press("ArrowDown")
        assert focused(page) == second
        page.keyboard.press("ArrowUp")
        assert focused(page) == first
        # Approve, see the result, undo it: the card is back, open, and rejected instead.
        page.keyboard.press("a")
        line = page.locator(f"#{first.replace('interrupt-', 'decided-')}")
        expect(line.get_by_test_id("outcome")).to_have_text("Approved", timeout=TIMEOUT)
        expect(line).to_be_focused()
        page.keyboard.press("u")
        expect(page.locator(f"#{first}")).to_be_focused(timeout=TIMEOUT)
        page.keyboard.press("r")
        expect(line.get_by_test_id("outcome")).to_have_text("Rejected", timeout=TIMEOUT)
        decided = {"approve": 0, "reject": 1, "cancel": 0, "edit": 0}
        edited = False
        keys = ["a", "r", "d"]
        while cards.count():
            page.keyboard.press("j")
            # As a reader would: the card shown whole (a folded one is read as it opens) before a key decides it.
            expect(page.locator("[data-card]:focus:not([data-folded])")).to_have_count(1)
            card_id = focused(page)
            card = page.locator(f"#{card_id}")
            if not edited and card.locator("details[data-edit]").count():
                # Edit & approve: e opens the first field; Enter asks for the diff; Tab reaches its button.
                page.keyboard.press("e")
                page.keyboard.press("Tab")  # to Subject
                page.keyboard.press("ControlOrMeta+a")
                page.keyboard.type("Moved to Friday")
                page.keyboard.press("Enter")
                button = card.get_by_role("button", name="Approve with these edits")
                expect(button).to_be_visible(timeout=TIMEOUT)
                for _ in range(12):
                    if button.evaluate("b => b === document.activeElement"):
                        break
                    page.keyboard.press("Tab")
                page.keyboard.press("Enter")
                edited, action = True, "edit"
            else:
                key = keys[sum(decided.values()) % len(keys)]
                if key == "d" and not card.locator("[data-key=d]").count():
                    key = "r"
                page.keyboard.press(key)
                action = {"a": "approve", "r": "reject", "d": "cancel"}[key]
            result = page.locator(f"#{card_id.replace('interrupt-', 'decided-')}")
            expect(result).to_be_focused(timeout=TIMEOUT)
            decided[action] += 1
        assert sum(decided.values()) == total and decided["edit"] == 1 and decided["cancel"] >= 1
        expect(page.get_by_test_id("inbox-count")).to_have_text("0", timeout=TIMEOUT)
        with site.api() as api:
            assert api.get("/api/interrupts/", params={"status": "pending"}).json()["count"] == 0
            actions = []
            for thread in threads:
                for asked in api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]:
                    actions += [d["action"] for d in api.get(f"/api/interrupts/{asked['id']}/").json()["decisions"]
                                if d["superseded_at"] is None]
        assert sorted(actions) == sorted(a for a, n in decided.items() for _ in range(n)), actions
    finally:
        me.close()
