"""A hostile agent against real Chromium: agent text is inert on every page, and the CSP holds.

The agent (hostile_agent.py) puts script payloads in every field it controls.
Each page is loaded, its details opened, its fields, labels and in-page links
clicked, every element carrying agent text hovered and every focusable element
reached with Tab; then no payload may have run (``window.__pwned``, the tab
title, a dialog), no interrupt may have been decided, the DOM may hold no
event-handler attribute or ``javascript:`` URL, and our own pages may cause
no ``securitypolicyviolation``.
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from .conftest import settled, until
from .hostile_agent import MARK, TEXT, HostileAgent

TIMEOUT = 15_000

# Whether agent text stays inert is the pages' escaping, their scripts and the CSP: the same code on either
# back end. `make test` checks it on SQLite, and `make test-scale` leaves it out (``backend_free``), as it
# does what a page looks like (test_screens); the PostgreSQL pass keeps the API's own fuzzing (schemathesis).
pytestmark = pytest.mark.backend_free

# Collects every CSP violation of a page, from its first script on.
WATCH_CSP = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(
  {directive: e.violatedDirective, blocked: e.blockedURI, sample: e.sample, source: e.sourceFile, line: e.lineNumber}));
"""

# What a payload that became markup would leave in the DOM.
DOM_FINDINGS = """
() => {
  const found = [];
  for (const element of document.querySelectorAll("*")) {
    for (const attribute of element.attributes) {
      const name = attribute.name.toLowerCase(), value = attribute.value.toLowerCase();
      if (name.startsWith("on")) found.push(`${element.tagName} ${name}`);
      if (["href", "src", "action", "formaction", "data", "xlink:href"].includes(name)
          && value.trim().startsWith("javascript:"))
        found.push(`${element.tagName} ${name}=${value.slice(0, 40)}`);
      if (name === "srcdoc") found.push(`${element.tagName} srcdoc`);
      if (name === "formaction") found.push(`${element.tagName} formaction`);
      if (name === "autofocus") found.push(`${element.tagName} autofocus`);
      if (name.startsWith("hx-on") || (name.startsWith("hx-") && value.includes("__pwned")))
        found.push(`${element.tagName} ${name}`);
    }
    if (element.tagName === "IMG" && element.getAttribute("src") === "x") found.push("IMG src=x");
    if (["IFRAME", "OBJECT", "EMBED"].includes(element.tagName)) found.push(element.tagName);
    if (element.tagName === "SCRIPT" && !element.src && element.type !== "application/json")
      found.push("inline SCRIPT");
  }
  return found;
}
"""


@pytest.fixture(scope="module")
def hostile(site):
    agent = HostileAgent().start()
    with site.api() as api:
        for name in ("hostile", "failing"):
            response = api.post("/api/agents/", json={"name": name, "url": f"{agent.url}/{name}/", "description": TEXT})
            assert response.status_code == 201, response.text
        threads = {}
        for key, name in (("pending", "hostile"), ("audited", "hostile"), ("failed", "failing")):
            response = api.post("/api/threads/", json={"agent": name, "message": f"{key} thread"})
            assert response.status_code == 201, response.text
            threads[key] = response.json()["thread"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            counts = [
                api.get("/api/interrupts/", params={"thread": threads[k]}).json()["count"]
                for k in ("pending", "audited")
            ]
            if counts == [3, 3] and _run_statuses(site, threads["failed"]) == ["failed"]:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the hostile runs did not arrive: {counts}, {_run_statuses(site, threads['failed'])}")
        # One thread's interrupts decided, so the audit trail shows the agent's proposals.
        for asked in api.get("/api/interrupts/", params={"thread": threads["audited"]}).json()["results"]:
            assert api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "cancel"}).status_code == 201
    yield threads
    agent.stop()


def _run_statuses(site, thread):
    return [status for (status,) in site.query(
        "SELECT r.status FROM interrupts_run r JOIN interrupts_thread t ON r.thread_id = t.id WHERE t.thread_id = %s",
        thread)]


def _still_pending(site, thread):
    with site.api() as api:
        asked = api.get("/api/interrupts/", params={"thread": thread}).json()["results"]
    assert len(asked) == 3 and {i["status"] for i in asked} == {"pending"}, [
        (i["interrupt_id"], i["status"]) for i in asked]


def _visible(locator):
    try:
        return locator.is_visible()
    except Exception:
        return False


def probe(person, path: str, *, ours: bool = True, ready=None) -> dict:
    """Load ``path``, then click, hover and Tab through it; fail if any payload ran.

    Returns what was seen (CSP violations, DOM findings), for the caller to report.
    """
    page = person.page
    if not getattr(person, "watching_csp", False):
        page.add_init_script(WATCH_CSP)
        person.watching_csp = True
    response = page.goto(f"{person.site.url}{path}")
    assert response.ok, (path, response.status)
    policy = response.headers["content-security-policy"]
    # The nonce is in the header only when the page used it (Django's LazyNonce).
    assert "script-src 'self'" in policy and "unsafe" not in policy, (path, policy)
    if ready:
        ready(page)
    settled(page)  # autofocus, onload, animations
    main = page.locator("main") if page.locator("main").count() else page.locator("body")
    # Click: every details summary (opens them, so what they hold can be hovered), label, field
    # and in-page link; never a button (Approve, Reject, Cancel, Send answer would decide).
    for selector in ("summary", "label", "input:not([type=hidden]):not([type=submit])", "select", "textarea",
                     "a[href^='#'], a[href^='javascript:'], a:not([href])"):
        # (Not the filters: they would filter the agent's cards away.)
        for element in main.locator(f":is({selector}):not(form[role=search] *)").all()[:80]:
            if _visible(element):
                try:
                    # A real click at the element's centre, without waiting for it to be still and
                    # uncovered: what covers it (its neighbour) takes the click, as a person's would.
                    element.click(force=True, timeout=1000)
                except Exception:
                    pass  # it went away with an earlier click
    page.keyboard.press("Escape")
    # Hover every element whose own text carries the agent's mark.
    for element in page.locator(f"xpath=//*[contains(text(), '{MARK}')]").all()[:200]:
        if _visible(element):
            try:
                element.hover(force=True, timeout=500)
            except Exception:
                pass
    # Tab through every focusable element (and a little past the end).
    focusable = page.locator("a[href], button, input, select, textarea, summary, [tabindex]").count()
    for _ in range(min(focusable + 3, 150)):
        page.keyboard.press("Tab")
    settled(page)
    seen = {
        "pwned": page.evaluate("window.__pwned"),
        "title": page.title(),
        "violations": page.evaluate("window.__violations || []"),
        "dom": page.evaluate(DOM_FINDINGS),
    }
    assert seen["pwned"] is None, (path, seen)
    assert seen["title"] != "PWNED", (path, seen)  # what a payload sets it to (agent text may be in it, as text)
    assert person.dialogs == [], (path, person.dialogs)
    assert seen["dom"] == [], (path, seen["dom"])
    if ours:
        assert seen["violations"] == [], (path, seen["violations"])
    return seen


def test_inbox_cards_and_schema_forms_are_inert(reviewer, site, hostile):
    seen = probe(reviewer, f"/inbox/?thread={hostile['pending']}",
                 ready=lambda page: expect(page.locator("[data-card]")).to_have_count(3, timeout=TIMEOUT))
    page = reviewer.page
    # The form was built (json-editor ran) and shows the agent's text as text.
    form = page.locator("form[data-schema-form]:has(.schema-editor)")
    expect(form.locator(".schema-editor :is(input, textarea, select):visible").first).to_be_visible()
    expect(form.locator(".schema-editor")).to_contain_text("<img src=x onerror=")
    # Nothing of the renderer keywords arrived: no links, no extra attributes.
    assert form.locator(".schema-editor a").count() == 0
    assert page.locator("[style*='9999'], [autofocus]").count() == 0  # containerAttributes' style, autofocus
    # The schema past the bounds is answered as JSON.
    assert page.locator("form[data-schema-form] .fallback:visible").count() == 1
    # The full inbox, the thread page's card list, and one more refresh of the list.
    probe(reviewer, "/inbox/")
    _still_pending(site, hostile["pending"])
    assert seen["violations"] == []


def test_markup_that_slipped_into_an_answer_form_still_cannot_decide(reviewer, site, hostile):
    # Should markup ever get past the allow-list into an answer form, the page itself refuses
    # what it could do: a button of its own (pressed, or by Enter in a field) or an htmx element,
    # posting to another interrupt's decide address. The card answered as JSON has no editor
    # whose own checks would cancel the submit first, so only the guard stands in the way.
    page = reviewer.open(f"/inbox/?thread={hostile['pending']}")
    expect(page.locator("[data-card]")).to_have_count(3, timeout=TIMEOUT)
    with site.api() as api:
        victim = [i for i in api.get("/api/interrupts/", params={"thread": hostile["pending"]}).json()["results"]
                  if i["reason"] == "tool_call"][0]
    target = f"/interrupts/{victim['id']}/decide/"
    sent = []
    page.on("request", lambda request: sent.append(request.url) if request.method == "POST" else None)
    form = page.locator("form[data-schema-form]:has(.fallback:visible)")
    expect(form).to_have_count(1)
    # Each attempt as the guard left it (window's capture runs first; the verdict is read a task later).
    page.evaluate("""() => {
        window.__attempts = [];
        const note = (kind, event) => setTimeout(() => window.__attempts.push([kind, event.defaultPrevented]));
        window.addEventListener("submit", (event) => note("submit", event), true);
        document.addEventListener("htmx:configRequest", (event) => note("htmx", event));
    }""")
    form.evaluate("""(form, target) => {
        const button = document.createElement("button");
        button.setAttribute("formaction", target); button.name = "action"; button.value = "approve";
        button.textContent = "Looks harmless"; button.id = "slipped";
        const field = document.createElement("input"); field.id = "slipped-field";
        form.prepend(button, field);
        const poster = document.createElement("div");
        poster.setAttribute("hx-post", target); poster.setAttribute("hx-trigger", "load");
        poster.setAttribute("hx-vals", '{"action": "approve"}');
        form.append(poster);
        htmx.process(form);
    }""", target)
    page.locator("#slipped").click(timeout=TIMEOUT)
    page.locator("#slipped-field").fill("typed", timeout=TIMEOUT)
    page.locator("#slipped-field").press("Enter", timeout=TIMEOUT)
    # The button, Enter in the field, and the htmx element have each been tried and refused.
    until(page, "() => window.__attempts.filter(([kind]) => kind === 'submit').length >= 2"
                " && window.__attempts.some(([kind]) => kind === 'htmx')", timeout=TIMEOUT)
    assert all(refused for _kind, refused in page.evaluate("window.__attempts")), page.evaluate("window.__attempts")
    assert not [url for url in sent if url.endswith(target)], sent
    with site.api() as api:
        assert api.get(f"/api/interrupts/{victim['id']}/").json()["status"] == "pending"
    _still_pending(site, hostile["pending"])


def test_the_edit_preview_is_inert(reviewer, site, hostile):
    page = reviewer.open(f"/inbox/?thread={hostile['pending']}")
    card = page.locator("[data-card]").filter(has=page.locator("details[data-edit]")).first
    card.locator("details[data-edit] > summary").click()
    card.get_by_role("button", name="Review changes").click()
    expect(card.get_by_test_id("edit-diff")).to_be_visible(timeout=TIMEOUT)
    settled(page)
    assert page.evaluate("window.__pwned") is None and page.evaluate(DOM_FINDINGS) == []
    _still_pending(site, hostile["pending"])


def test_thread_pages_are_inert_and_live_under_the_csp(reviewer, site, hostile):
    def live(page):
        # The WebSocket connects: connect-src 'self' covers ws: to this host.
        expect(page.locator("[data-live-status]")).to_have_text("live", timeout=TIMEOUT)
        expect(page.locator(".run-end")).to_have_count(1, timeout=TIMEOUT)

    probe(reviewer, f"/threads/{hostile['pending']}/", ready=live)
    page = reviewer.page
    expect(page.locator(".bubble.role-assistant .text").first).to_contain_text("<script>")
    probe(reviewer, f"/threads/{hostile['failed']}/", ready=live)
    expect(reviewer.page.get_by_test_id("run-end")).to_contain_text("<img src=x")
    probe(reviewer, "/threads/")
    _still_pending(site, hostile["pending"])


def test_audit_agents_and_registry_forms_are_inert(reviewer, site, hostile):
    probe(reviewer, "/audit/", ready=lambda page: expect(page.get_by_test_id("audit-row").first).to_be_visible())
    expect(reviewer.page.get_by_test_id("audit-row").first).to_contain_text(MARK)
    probe(reviewer, f"/threads/{hostile['audited']}/audit/")
    probe(reviewer, "/registry/")
    expect(reviewer.page.get_by_test_id("agents")).to_contain_text("<svg onload=")
    probe(reviewer, "/registry/hostile/edit/")
    _still_pending(site, hostile["pending"])


def test_admin_pages_are_inert_and_within_the_csp(reviewer, site, hostile):
    [(thread_pk,)] = site.query("SELECT id FROM interrupts_thread WHERE thread_id = %s", hostile["pending"])
    runs = site.query("SELECT id FROM interrupts_run WHERE thread_id = %s", thread_pk)
    interrupts = site.query("SELECT id FROM interrupts_interrupt WHERE run_id = %s", runs[0][0])
    # One event of each type (STATE_SNAPSHOT, CUSTOM, RUN_FINISHED with the interrupts, ...).
    events = site.query("SELECT MIN(id) FROM interrupts_event WHERE thread_id = %s GROUP BY type", thread_pk)
    [(agent_pk,)] = site.query("SELECT id FROM interrupts_agent WHERE name = 'hostile'")
    paths = ["/admin/", f"/admin/interrupts/thread/{thread_pk}/change/", f"/admin/interrupts/run/{runs[0][0]}/change/",
             f"/admin/interrupts/agent/{agent_pk}/change/", "/admin/interrupts/agent/", "/admin/interrupts/thread/",
             "/admin/interrupts/run/", "/admin/interrupts/interrupt/", "/admin/interrupts/event/",
             "/admin/interrupts/decision/"]
    paths += [f"/admin/interrupts/interrupt/{pk}/change/" for (pk,) in interrupts]
    paths += [f"/admin/interrupts/event/{pk}/change/" for (pk,) in events]
    for path in paths:
        probe(reviewer, path)
    _still_pending(site, hostile["pending"])


def test_the_api_docs_show_agent_json_inertly(reviewer, site, hostile):
    def execute(page):
        operation = page.locator("#operations-interrupts-interrupts_list")
        expect(operation).to_be_visible(timeout=TIMEOUT)
        operation.locator(".opblock-summary").click()
        operation.get_by_role("button", name="Try it out").click()
        operation.get_by_role("button", name="Execute").click()
        expect(operation.locator(".live-responses-table")).to_contain_text(MARK, timeout=TIMEOUT)

    probe(reviewer, "/api/docs/", ready=execute)
    _still_pending(site, hostile["pending"])


def test_the_browser_enforces_the_csp(reviewer, site, hostile):
    page = reviewer.page
    page.add_init_script(WATCH_CSP)
    reviewer.open(f"/inbox/?thread={hostile['pending']}")
    assert page.evaluate("window.__violations") == []
    # An inline script without the nonce, as a payload that became markup would be: refused.
    page.evaluate("""() => {
        const script = document.createElement("script");
        script.textContent = "window.__injected = 1";
        document.body.append(script);
        const img = document.createElement("img");
        img.setAttribute("src", "x");
        img.setAttribute("onerror", "window.__injected = 2");
        document.body.append(img);
    }""")
    # The browser reports each refusal as it makes it: once both are in, neither ran.
    until(page, "() => ['script-src-elem', 'script-src-attr'].every("
                "d => window.__violations.some(v => v.directive === d))", timeout=TIMEOUT)
    assert page.evaluate("window.__injected") is None
