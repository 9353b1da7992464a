"""Every page and state of the review screens in real Chromium, at 1440x900 and 390x844: axe-core finds no
serious or critical violation (light and dark), the page never scrolls sideways, and a screenshot of each
lands in test-artifacts/<state>-<width>.png (issue 15).

One served app, one browser and two logged-in people (the demo reviewer, who is staff, and Alice, a reviewer
who is not) for the whole module; each width re-sizes their pages rather than starting anything new. Each
test walks its states to the end before failing, so one run lists everything wrong; every test also
rewrites test-artifacts/axe-report.md, the module's whole list so far.
"""

import time
from collections import defaultdict

import pytest
from playwright.sync_api import expect

from .conftest import ARTIFACTS, Reviewer, axe_findings, shoot, sideways_overflow, until
from .test_review import TIMEOUT, start

# What a page looks like (its layout, contrast, axe's findings, its forms) is the same on either back end:
# `make test` checks it on SQLite, and `make test-scale` leaves it out (``backend_free``).
pytestmark = pytest.mark.backend_free

WIDTHS = {1440: 900, 390: 844}
# What the colour scheme changes: in dark mode axe re-checks only contrast, the rest is the same page.
COLOUR_RULES = ["color-contrast"]
# Light-mode screenshots of everything; dark ones of these two (state, width) only.
DARK_SHOTS = {("inbox", 1440), ("thread-finished", 390)}
DEMO_AGENTS = ["mailer", "bulk-mailer", "deployer", "filing", "planner", "janitor"]

found: dict[str, list] = defaultdict(list)  # test name -> findings and overflows of its states


class Walk:
    """The states one test visits: each is checked in light and dark and photographed; failures wait for the end."""

    def __init__(self, name: str):
        self.name = name
        self.problems = found[name]
        self.problems.clear()
        self.states: list[str] = []
        self.finished = False

    def check(self, page, state: str, *, within: str | None = None):
        """``within``: the part of a page already checked whole that this state changes (axe looks only
        there, and the screenshot is of the window, where that part is, not the whole page again)."""
        width = page.viewport_size["width"]
        self.states.append(state)
        settle(page)
        self.problems.extend(axe_findings(page, state, within=within))
        over = sideways_overflow(page)
        if over > 0:
            culprits = page.evaluate(WIDEST, width)
            self.problems.append({"state": state, "width": width, "scheme": "light", "url": page.url,
                                  "rule": "sideways-scroll", "impact": "serious", "target": "; ".join(culprits),
                                  "html": f"the page is {over} px wider than the {width} px window", "summary": ""})
        shoot(page, state, full_page=not within)
        page.emulate_media(color_scheme="dark")
        try:
            self.problems.extend(axe_findings(page, state, COLOUR_RULES, within))
            if (state, width) in DARK_SHOTS:
                shoot(page, f"{state}-dark", full_page=not within)
        finally:
            page.emulate_media(color_scheme="light")

    def done(self):
        self.finished = True
        write_report()
        assert not self.problems, f"{len(self.problems)} problems:\n" + describe(self.problems)


# The outermost elements sticking out past the window's right edge: where a sideways scroll comes from.
WIDEST = """width => {
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (box.right > width + 1 && !(el.parentElement && el.parentElement.getBoundingClientRect().right > width + 1)) {
      const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
        (el.classList.length ? '.' + [...el.classList].join('.') : '');
      out.push(`${name} (right edge ${Math.round(box.right)} px)`);
      if (out.length >= 5) break;
    }
  }
  return out;
}"""


def describe(problems) -> str:
    return "\n".join(f"- {p['state']} @{p['width']} {p['scheme']}: {p['rule']} ({p['impact']}) {p['target']}"
                     f"\n    {p['html']}" + (f"\n    {p['summary']}" if p["summary"] else "") for p in problems)


def write_report():
    everything = [p for problems in found.values() for p in problems]
    lines = ["# axe-core (serious, critical) and sideways scroll, per page, state and width", "",
             f"{len(everything)} problems, {time.strftime('%Y-%m-%d %H:%M:%S')}", ""]
    by_rule = defaultdict(int)
    for p in everything:
        by_rule[(p["rule"], p["impact"])] += 1
    lines += [f"- {rule} ({impact}): {count}" for (rule, impact), count in sorted(by_rule.items())] + [""]
    lines += ["The test module: tests/browser/test_screens.py; screenshots beside this file.", ""]
    lines += ["| state | width | scheme | rule | impact | selector | snippet |", "|---|---|---|---|---|---|---|"]
    for p in everything:
        cells = [p["state"], str(p["width"]), p["scheme"], p["rule"], p["impact"], f"`{p['target']}`",
                 f"`{p['html']}`"]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "axe-report.md").write_text("\n".join(lines) + "\n")


@pytest.fixture(params=list(WIDTHS), ids=lambda w: f"{w}px")
def width(request):
    return request.param


@pytest.fixture(scope="module")
def staff(browser, site):
    person = Reviewer(browser, site, "reviewer", "countersign")
    yield person
    person.close()


@pytest.fixture(scope="module")
def member(browser, site):
    person = Reviewer(browser, site, "alice", "alice-pass-1234")
    yield person
    person.close()


@pytest.fixture
def walk(request):
    made = Walk(request.node.name)
    yield made
    if not made.finished:  # the test broke off: the report says so, and where
        after = ", ".join(made.states) or "none"
        made.problems.append({"state": f"{made.name} stopped early (after: {after})", "width": "", "scheme": "",
                              "url": "", "rule": "not-reached", "impact": "", "target": "",
                              "html": "the test failed before its last state: see pytest's output", "summary": ""})
        write_report()


def sized(person, width):
    person.page.set_viewport_size({"width": width, "height": WIDTHS[width]})
    return person


def settle(page):
    """Wait until the page's own scripts have drawn it (the schema forms are built after load) and its
    transitions have ended: axe measures colours as they are, and half-way through a fade they are neither."""
    page.wait_for_load_state("load")
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    until(page, """() => document.getAnimations().every(a =>
        a.playState !== 'running' || a.effect?.getTiming().iterations === Infinity)""", timeout=TIMEOUT)


def test_the_login_page(browser, site, width, walk):
    context = browser.new_context(viewport={"width": width, "height": WIDTHS[width]})
    try:
        page = context.new_page()
        response = page.goto(f"{site.url}/accounts/login/")
        # axe runs beside the app's own Content-Security-Policy, as shipped: nothing here loosens it.
        assert "script-src 'self' 'nonce-" in response.headers["content-security-policy"]
        walk.check(page, "login")
    finally:
        context.close()
    walk.done()


def test_the_empty_inbox(staff, width, walk):
    # First of the module's inbox tests: nothing has been started yet.
    page = sized(staff, width).open("/inbox/")
    expect(page.locator("[data-card]")).to_have_count(0)
    walk.check(page, "inbox-empty")
    walk.done()


@pytest.fixture(scope="module")
def demo_threads(site):
    # Started together, then awaited: one after another, each waiting for its interrupts, took twice as long.
    with site.api() as api:
        threads = {}
        for agent in DEMO_AGENTS:
            made = api.post("/api/threads/", json={"agent": agent})
            assert made.status_code == 201, made.text
            threads[agent] = made.json()["thread"]
        deadline = time.monotonic() + TIMEOUT / 1000
        while not all(api.get("/api/interrupts/", params={"thread": t}).json()["count"] for t in threads.values()):
            assert time.monotonic() < deadline, "a demo agent raised no interrupt"
            time.sleep(0.05)
    return threads


def test_the_inbox_with_every_demo_agent(staff, member, demo_threads, width, walk):
    page = sized(staff, width).open("/inbox/?scope=all")
    for thread in demo_threads.values():
        expect(page.locator(f"#inbox-list a[href*='{thread}']").first).to_be_attached(timeout=TIMEOUT)
    walk.check(page, "inbox")

    # The keyboard shortcuts, from the keyboard.
    page.locator("body").press("?")
    expect(page.locator("dialog#shortcuts, [role=dialog]").first).to_be_visible(timeout=TIMEOUT)
    walk.check(page, "inbox-shortcuts", within="dialog#shortcuts")
    page.keyboard.press("Escape")

    # The filters, opened where they fold away (a phone), and used.
    opener = page.locator("details:not([open]) > summary:has-text('Filter'), "
                          "button[aria-expanded='false']:has-text('Filter')")
    if opener.count():
        opener.first.click()
    page.locator("select[name=agent]").select_option("mailer")
    page.wait_for_url("**agent=mailer**", timeout=TIMEOUT)
    expect(page.locator("[data-card]").first).to_be_visible(timeout=TIMEOUT)
    walk.check(page, "inbox-filters", within="form[role=search]")

    page = sized(member, width).open("/inbox/")
    expect(page.locator("[data-card]").first).to_be_visible(timeout=TIMEOUT)
    walk.check(page, "inbox-reviewer")
    walk.done()


def test_a_card_after_a_bad_answer_and_after_a_decision(staff, site, width, walk):
    filing, planner = start(site, "filing"), start(site, "planner")
    page = sized(staff, width).open(f"/inbox/?thread={filing}")
    card = page.locator("[data-card]").first
    expect(card.get_by_role("button", name="Send answer")).to_be_visible(timeout=TIMEOUT)
    card.locator("input[name='root[year]']").fill("1999")
    card.get_by_role("button", name="Send answer").click()
    expect(card.locator(".errmsg, [role=alert], .error").first).to_be_visible(timeout=TIMEOUT)
    walk.check(page, "card-error")

    # One decision of two: the card says in place who decided and what, while the batch waits.
    page = staff.open(f"/inbox/?thread={planner}")
    budget = page.locator("[data-card][data-interrupt-id='approve-budget']")
    budget.get_by_role("button", name="Yes").click()
    expect(page.get_by_test_id("batch-progress")).to_contain_text("1 of 2", timeout=TIMEOUT)
    walk.check(page, "card-decided")
    walk.done()


def test_edit_and_approve_its_diff_and_the_thread_live_then_finished(staff, site, width, walk):
    thread = start(site, "mailer", "Email c@d.com about lunch")
    page = sized(staff, width).open(f"/inbox/?thread={thread}")
    card = page.locator("[data-card]").first
    card.get_by_text("Edit & approve").first.click()
    body = card.locator("textarea[name=edited_args], [name$='[body]']").first
    expect(body).to_be_visible(timeout=TIMEOUT)
    if body.get_attribute("name") == "edited_args":
        body.fill('{"to": "c@d.com", "subject": "Lunch", "body": "Lunch on Friday at noon, the usual place?"}')
    else:
        body.fill("Lunch on Friday at noon, the usual place?")
    card.get_by_role("button", name="Review changes").click()
    expect(card.get_by_test_id("edit-diff")).to_be_visible(timeout=TIMEOUT)
    walk.check(page, "edit-preview")

    # The thread page, open while the run waits for the decision, then live as the resumed run finishes.
    live = staff.context.new_page()
    live.set_viewport_size({"width": width, "height": WIDTHS[width]})
    try:
        live.goto(f"{site.url}/threads/{thread}/")
        expect(live.locator(".bubble, [data-testid=tool-call]").first).to_be_visible(timeout=TIMEOUT)
        walk.check(live, "thread-waiting")
        card.get_by_role("button", name="Approve with these edits").click()
        expect(live.get_by_test_id("tool-result").last).to_contain_text("Friday", timeout=TIMEOUT)
        walk.check(live, "thread-finished")
    finally:
        live.close()
    walk.check(page, "inbox-after-decision")
    walk.done()


@pytest.fixture(scope="module")
def webhook(site):
    # A receiver that is not there (the discard port): the deliveries page has failed tries to show.
    with site.api() as api:
        made = api.post("/api/webhooks/", json={"name": "ops-hook", "url": "http://127.0.0.1:9/hooks",
                                                "events": ["raised", "decided"]})
        assert made.status_code == 201, made.text
        start(site, "janitor")
        return made.json()


PAGES = [  # state, path, who (staff or member)
    ("threads", "/threads/", "staff"),
    ("audit", "/audit/", "staff"),
    ("insight", "/insight/", "staff"),
    ("agents", "/registry/", "staff"),
    ("agent-add", "/registry/add/", "staff"),
    ("policy-add", "/policies/add/", "staff"),
    ("webhooks", "/webhooks/", "staff"),
    ("deliveries", "/webhooks/deliveries/", "staff"),
    ("notifications", "/settings/notifications/", "member"),
]


def test_every_other_page(staff, member, demo_threads, webhook, width, walk):
    people = {"staff": sized(staff, width), "member": sized(member, width)}
    for state, path, who in PAGES:
        page = people[who].open(path)
        walk.check(page, state)
    # The API's reference is drf-spectacular's Swagger UI, not our markup: photographed, not audited.
    page = people["staff"].open("/api/docs/")
    expect(page.locator(".swagger-ui").first).to_be_visible(timeout=TIMEOUT)
    shoot(page, "api-docs")
    walk.done()
