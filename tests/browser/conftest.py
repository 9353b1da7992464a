"""Real Chromium (Debian's, never a downloaded build) driven by Playwright against `manage.py serve`."""

import os
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from interrupts.conf import INBOX_VIEW_COOKIE

from ..servers import ROOT, ServedApp
from . import chromium

# Playwright's assertions wait 5 s by default; a loaded CI machine (2 cores, 3 workers, a server and
# Chromium each) has missed that while the page was still on its way to the awaited state.
expect.set_options(timeout=15_000)

ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def chromium_session(django_db_setup):
    # Set up after the test database, so closed (with Playwright's event loop) before it is
    # torn down: Django refuses to drop it from inside a running loop.
    yield
    chromium.close()


def _for_the_module(launched):
    # One Chromium per worker (a launch is a second or two); each module's contexts are closed
    # after it, so no page of one file lives on into the next.
    yield launched
    for context in list(launched.contexts):
        context.close()


@pytest.fixture(scope="module")
def browser(chromium_session):
    yield from _for_the_module(chromium.shared())


@pytest.fixture(scope="module")
def full_browser(chromium_session):
    """Debian's full Chromium, for a test of what its headless shell lacks (see ``chromium``)."""
    yield from _for_the_module(chromium.shared(full=True))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    # Retries wait 30 s: a test that retries an unreachable agent does it with the button.
    # Alice, a second reviewer, comes with the database (its template), not a Django process per module.
    app = ServedApp(tmp_path_factory.mktemp("browser"), self_approving=True, colleague=True,
                    COUNTERSIGN_POLL_INTERVAL="0.2", COUNTERSIGN_RETRY_BASE="30").start()
    yield app
    app.stop()


# A person's session cookie by (site, username), kept from their first login on that site: their later
# contexts start signed in, skipping three page loads and the server's password hash. Cookies only:
# what a page keeps in localStorage stays with its context.
_signed_in: dict[tuple[str, str], list[dict]] = {}


class Reviewer:
    """One person in one browser context, logged in, with every page error collected."""

    def __init__(self, browser, site, username, password, view="all", **device):
        self.site = site
        signed_in = _signed_in.get((site.url, username))
        # ``device``: more of Playwright's context options (a phone's has_touch, is_mobile).
        self.context = browser.new_context(**{"viewport": {"width": 1280, "height": 1000}, **device},
                                           storage_state={"cookies": signed_in or [], "origins": []})
        # The inbox's view, as this browser keeps it (a cookie, read by the server too): "all" cards stacked
        # (what most tests click through), or "one" at a time beside the triage list, the others folded
        # (the app's default; tests/browser/test_triage.py).
        self.context.add_cookies([{"name": INBOX_VIEW_COOKIE, "value": view, "url": site.url}])
        # Marks the page once the inbox has read its list again since its socket opened (``inbox_live``): the
        # list, not a batch (a folded one read whole as it opens) put in place meanwhile.
        self.context.add_init_script("""
            document.addEventListener("countersign:inbox-open", () => { window.__inboxOpened = true; });
            document.addEventListener("countersign:refreshed", (event) => {
                const root = document.documentElement;
                const list = event.detail && event.detail.list;
                if (window.__inboxOpened && list && list.id === "inbox-list") root.dataset.inboxRead = "yes";
                root.dataset.inboxReads = String(Number(root.dataset.inboxReads || 0) + 1);
            });""")
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        if signed_in:
            self.page.goto(f"{site.url}/inbox/")
            if self.page.url == f"{site.url}/inbox/":
                return
            # The server no longer honours that session: log in afresh.
        self.page.goto(f"{site.url}/accounts/login/")
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(f"{site.url}/inbox/")
        _signed_in[(site.url, username)] = self.context.cookies()

    def open(self, path: str, live: bool = True):
        """Go to ``path``; an inbox page is handed back once live (``inbox_live``), or a click could land on a
        card that the read on its socket's opening then replaces (ci39, ci44). ``live=False``: at once."""
        self.page.goto(f"{self.site.url}{path}")
        if live and INBOX_PAGE.match(path):
            self.inbox_live()
        return self.page

    def inbox_live(self, timeout: float = 30_000) -> None:
        """Until the page's inbox socket has opened and the list it reads again then is in place: what
        a test changes in the cards before that (an injected element) is swapped away by that read."""
        # A locator, not wait_for_function: polling a script is an eval, which the CSP refuses.
        expect(self.page.locator("html[data-inbox-read]")).to_be_attached(timeout=timeout)

    def reads(self) -> int:
        """How many times the page has put a fresh read of its list (or of a batch) in place."""
        return int(self.page.locator("html").get_attribute("data-inbox-reads") or 0)

    def read_again(self, since: int, timeout: float = 15_000) -> None:
        """Until the page has put another read in place since ``reads()`` said ``since``."""
        expect(self.page.locator(f"html[data-inbox-reads='{since + 1}']")).to_be_attached(timeout=timeout)

    def screenshot(self, name: str):
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    def close(self):
        assert self.errors == [], self.errors
        self.context.close()


@pytest.fixture
def reviewer(browser, site):
    person = Reviewer(browser, site, "reviewer", "countersign")
    yield person
    person.close()


@pytest.fixture
def alice(browser, site):
    person = Reviewer(browser, site, "alice", "alice-pass-1234")
    yield person
    person.close()


# --- Accessibility and screenshots (issue 15: axe on every page and state, both widths) ---------------
AXE_JS = Path(__file__).resolve().parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
# WCAG 2.0, 2.1 and 2.2 at levels A and AA, and axe's best practices.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa", "best-practice"]
AXE_BLOCKING = ("serious", "critical")


def axe_source() -> str:
    """axe-core as tests/browser/axe/package-lock.json pins it (make test runs npm ci there)."""
    if not AXE_JS.exists():
        message = f"{AXE_JS.relative_to(ROOT)} is missing: run make test (it runs npm ci in tests/browser/axe)"
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the accessibility tests: {message}")
        pytest.skip(f"ACCESSIBILITY TESTS SKIPPED: {message}")
    return AXE_JS.read_text()


def axe_findings(page, state_name: str, rules: list[str] | None = None, within: str | None = None) -> list[dict]:
    """axe's serious and critical violations on the page as it is now, one dict per element.

    axe is evaluated through the DevTools protocol (page.evaluate), which the
    page's Content-Security-Policy does not govern: the app's CSP stays as it
    ships (no bypass_csp), and axe sees the page its users see. ``rules``
    narrows the run to those rule ids (e.g. colour contrast in dark mode);
    ``within`` (a selector) to one part of a page already checked whole, such
    as a dialog just opened (page-wide rules then do not run).
    """
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(axe_source())
    options = {"runOnly": {"type": "rule", "values": rules} if rules else {"type": "tag", "values": AXE_TAGS},
               "resultTypes": ["violations"]}
    violations = page.evaluate("([within, options]) => axe.run(within ? {include: [within]} : document, options)"
                               ".then(r => r.violations)", [within, options])
    width = page.viewport_size["width"] if page.viewport_size else 0
    scheme = "dark" if page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches") else "light"
    return [{"state": state_name, "width": width, "scheme": scheme, "url": page.url, "rule": v["id"],
             "impact": node.get("impact") or v["impact"], "help": v["help"],
             "target": " ".join(str(t) for t in node["target"]), "html": node["html"][:160],
             "summary": (node.get("failureSummary") or "").replace("\n", " ")[:240]}
            for v in violations for node in v["nodes"] if (node.get("impact") or v["impact"]) in AXE_BLOCKING]


def describe_findings(findings: list[dict]) -> str:
    return "\n".join(f"- {f['state']} @{f['width']} {f['scheme']}: {f['rule']} ({f['impact']}) {f['target']}\n"
                     f"    {f['html']}\n    {f['summary']}" for f in findings)


def axe_check(page, state_name: str, rules: list[str] | None = None, within: str | None = None) -> list[dict]:
    """Assert axe finds no serious or critical violation on the page; return what it found (nothing)."""
    findings = axe_findings(page, state_name, rules, within)
    assert not findings, f"axe: {len(findings)} serious/critical on {state_name}:\n{describe_findings(findings)}"
    return findings


def shoot(page, name: str, *, full_page: bool = True) -> Path:
    """A screenshot at test-artifacts/<name>-<width>.png (the whole page unless ``full_page`` is off)."""
    ARTIFACTS.mkdir(exist_ok=True)
    width = page.viewport_size["width"] if page.viewport_size else 0
    path = ARTIFACTS / f"{name}-{width}.png"
    page.screenshot(path=str(path), full_page=full_page, animations="disabled")
    return path


def settled(page) -> None:
    """Until the page has loaded (its images loaded or failed) and painted twice since.

    By then autofocus, onload and onerror handlers and a first frame's animations
    have run: what a check for their effects waits on, rather than a fixed time.
    """
    page.wait_for_load_state("load")
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def press(page, control) -> None:
    """Press ``control`` as a hand does: the button held down over two frames, then let go.

    Playwright's click sends its mousedown and mouseup back to back; a person's are a tenth of a
    second apart, and whatever the page moves in between (a field's error cleared on blur, a live
    line added above) takes the click away from the button.
    """
    control.scroll_into_view_if_needed()
    box = control.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    page.mouse.up()


def runs_settled(site, thread: str, timeout: float = 15) -> list[str]:
    """Wait until no run of ``thread`` is queued or streaming, so nothing more goes to its agent; their statuses."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = [status for (status,) in site.query(
            "SELECT r.status FROM interrupts_run r JOIN interrupts_thread t ON r.thread_id = t.id "
            "WHERE t.thread_id = %s ORDER BY r.id", thread)]
        if not {"queued", "streaming"} & set(statuses):
            return statuses
        assert time.monotonic() < deadline, f"runs of {thread} still going: {statuses}"
        time.sleep(0.05)


# The inbox page's own address, with or without a query: what its live read of the list fetches.
INBOX_PAGE = re.compile(r".*/inbox/(\?.*)?$")


def live_read(request) -> bool:
    """The inbox's live read of its list: a fetch with HX-Target and no HX-Current-URL (htmx sends both)."""
    return "hx-target" in request.headers and "hx-current-url" not in request.headers


def until(page, predicate: str, timeout: float = 15_000) -> None:
    """Until ``predicate`` (a JS arrow function of no arguments) holds in the page, checked there every 50 ms.

    page.evaluate, which the CSP allows: wait_for_function builds its polled check with an eval,
    which our CSP refuses whenever the condition does not hold at once.
    """
    page.evaluate(f"""() => new Promise((done, fail) => {{
        const holds = {predicate};
        const started = performance.now();
        const check = () => {{
            let held = false;
            try {{ held = holds(); }} catch (problem) {{ /* not yet */ }}
            if (held) done(true);
            else if (performance.now() - started > {timeout}) fail(new Error("still false: " + holds));
            else setTimeout(check, 50);
        }};
        check();
    }})""")


def sideways_overflow(page) -> int:
    """How many CSS pixels the page itself scrolls sideways (0 when it fits the window)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def no_sideways_scroll(page) -> None:
    over = sideways_overflow(page)
    assert over <= 0, f"{page.url} scrolls sideways by {over} px at {page.viewport_size['width']} px"
