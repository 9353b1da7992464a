"""The Content-Security-Policy on every page, its nonce, and templates that need nothing inline."""

import base64
import hashlib
import re
from pathlib import Path

import pytest
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.http import Http404
from django.test import Client
from django.urls import include, path, reverse

from .. import factories as make

pytestmark = pytest.mark.django_db

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)
SCRIPT_TAG = re.compile(r"<script\b([^>]*)>", re.IGNORECASE)
COMMENT = re.compile(r"{% comment %}.*?{% endcomment %}|{#.*?#}", re.DOTALL)


@pytest.fixture
def staff(client):
    user = make.user(username="staff", is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


@pytest.fixture
def pages(staff):
    """A path of every page type, with an interrupt (and its schema form) to show."""
    agent = make.agent(name="evil", description="<script>alert(1)</script>")
    thread = make.thread(agent=agent)
    run = make.run(thread, agent=agent)
    make.event(run, 1, type="RUN_STARTED", payload={"type": "RUN_STARTED"})
    interrupt = make.interrupt(
        run,
        interrupt_id="ask",
        reason="input_required",
        response_schema={
            "type": "object",
            "properties": {"note": {"type": "string", "options": {"inputAttributes": {"onfocus": "x()"}}}},
        },
    )
    return {
        "inbox": reverse("inbox"),
        "threads": reverse("threads"),
        "thread": reverse("thread", args=[thread.thread_id]),
        "audit": reverse("audit"),
        "agents": reverse("agents"),
        "agent-edit": reverse("agent-edit", args=["evil"]),
        "agent-add": reverse("agent-add"),
        "api-docs": reverse("api-docs"),
        "admin": "/admin/",
        "admin-agent": f"/admin/interrupts/agent/{agent.pk}/change/",
        "admin-interrupts": "/admin/interrupts/interrupt/",
        "admin-interrupt": f"/admin/interrupts/interrupt/{interrupt.pk}/change/",
        "api": "/api/interrupts/",
    }


def policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split("; ")}


def test_every_page_type_has_the_policy(client, pages):
    for name, url in pages.items():
        response = client.get(url)
        assert response.status_code == 200, name
        found = policy(response)
        assert found["default-src"] == ["'self'"], name
        assert found["script-src"][0] == "'self'" and all(v.startswith("'nonce-") for v in found["script-src"][1:]), (
            name
        )
        assert found["style-src"] == ["'self'"], name
        assert found["object-src"] == found["base-uri"] == found["frame-ancestors"] == ["'none'"], name
        assert found["form-action"] == found["connect-src"] == ["'self'"], name
        assert found["img-src"] == ["'self'", "data:"], name
        assert "unsafe" not in response["Content-Security-Policy"], name


def test_the_login_page_has_it_too(client):
    assert "script-src 'self'" in client.get(reverse("login"))["Content-Security-Policy"]


def test_the_nonce_is_the_pages_scripts_nonce_and_new_each_time(client, pages):
    nonces = set()
    for name in ("inbox", "thread", "audit", "agents"):
        response = client.get(pages[name])
        [nonce] = [v[len("'nonce-"):-1] for v in policy(response)["script-src"] if v.startswith("'nonce-")]
        tags = SCRIPT_TAG.findall(response.content.decode())
        assert tags, name
        for attributes in tags:
            assert f'nonce="{nonce}"' in attributes, (name, attributes)
        nonces.add(nonce)
    assert len(nonces) == 4


def test_the_inbox_gets_the_reduced_schema_only(client, pages):
    body = client.get(pages["inbox"]).content.decode()
    assert 'data-schema="' in body and "inputAttributes" not in body and "onfocus" not in body


def test_htmx_evaluates_nothing(client, pages):
    body = client.get(pages["inbox"]).content.decode()
    [config] = re.findall(r"<meta name=\"htmx-config\" content='([^']*)'>", body)
    import json

    found = json.loads(config)
    assert found["allowEval"] is False and found["allowScriptTags"] is False and found["selfRequestsOnly"] is True
    assert found["includeIndicatorStyles"] is False
    [headers] = re.findall(r"<body hx-headers='([^']*)'", body)
    assert set(json.loads(headers)) == {"X-CSRFToken"}  # JSON, not a js: expression


def test_the_api_docs_load_their_script_from_this_origin(client, pages):
    body = client.get(pages["api-docs"]).content.decode()
    for attributes in SCRIPT_TAG.findall(body):
        assert "src=" in attributes, attributes
    assert "<style" not in body
    script = client.get(pages["api-docs"] + "?script=")
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")


def _templates():
    return sorted(TEMPLATES.rglob("*.html"))


@pytest.mark.parametrize("path", _templates(), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_no_template_has_an_inline_handler_or_script(path):
    text = COMMENT.sub("", path.read_text())  # comments may name what they avoid
    assert not HANDLER.search(text), HANDLER.search(text)
    for attributes in SCRIPT_TAG.findall(text):
        assert "src=" in attributes or 'type="application/json"' in attributes, attributes
    assert "javascript:" not in text.lower()
    assert "<style" not in text and " style=" not in text  # style-src is 'self'


# --- error pages: every status Django answers with a page of its own, DEBUG on (the default) and off ---------

def _raises(exception):
    @login_not_required
    def view(request):
        raise exception
    return view


urlpatterns = [
    path("csp-test/400/", _raises(SuspiciousOperation("a request Django refuses"))),
    path("csp-test/403/", _raises(PermissionDenied())),
    path("csp-test/404/", _raises(Http404("nothing here"))),
    path("csp-test/500/", _raises(RuntimeError("a view that fails"))),
    path("", include("project.urls")),
]

STYLE_BLOCK = re.compile(r"<style[^>]*>(.*?)</style>", re.DOTALL)
SCRIPT_BLOCK = re.compile(r"<script[^>]*>(.*?)</script>", re.DOTALL)


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def assert_strict(response) -> dict[str, list[str]]:
    """The site's policy: only our scripts (by origin or nonce), inline styles only Django's own, by hash."""
    found = policy(response)
    assert found["default-src"] == ["'self'"]
    assert found["script-src"][0] == "'self'" and all(v.startswith("'nonce-") for v in found["script-src"][1:])
    assert found["style-src"][0] == "'self'" and all(v.startswith("'sha256-") for v in found["style-src"][1:])
    assert found["object-src"] == found["base-uri"] == found["frame-ancestors"] == ["'none'"]
    assert found["form-action"] == found["connect-src"] == ["'self'"]
    assert "unsafe" not in response["Content-Security-Policy"]
    body = response.content.decode()
    # What the page holds inline runs only if the policy names it: its styles are Django's (their hash
    # is listed), and no inline script of a debug page (the 500's frame toggles) is let run.
    for style in STYLE_BLOCK.findall(body):
        assert _sha256(style) in found["style-src"] or "nonce" in body, style[:80]
    for script in SCRIPT_BLOCK.findall(body):
        assert _sha256(script) not in found["script-src"]
    return found


@pytest.fixture(params=[True, False], ids=["debug", "production"])
def debug(request, settings):
    settings.DEBUG = request.param
    settings.ALLOWED_HOSTS = ["testserver"]
    return request.param


ERROR_CASES = {
    "400 suspicious": ("/csp-test/400/", 400, {}),
    "400 host": ("/", 400, {"HTTP_HOST": "evil.example"}),
    "403": ("/csp-test/403/", 403, {}),
    "404 no route": ("/no/such/page/", 404, {}),
    "404 raised": ("/csp-test/404/", 404, {}),
    "500": ("/csp-test/500/", 500, {}),
}


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_error_pages_carry_the_policy(debug, case):
    path, status, extra = ERROR_CASES[case]
    response = Client(raise_request_exception=False).get(path, HTTP_ACCEPT="text/html", **extra)
    assert response.status_code == status
    found = assert_strict(response)
    if debug and status != 403:  # Django's technical pages, which opt out of every policy, are styled by hash
        assert STYLE_BLOCK.search(response.content.decode())
        assert len(found["style-src"]) > 1


@pytest.mark.urls(__name__)
def test_a_csrf_failure_page_carries_the_policy(debug):
    user = make.user(username="csrf")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = client.post(reverse("logout"))
    assert response.status_code == 403 and b"CSRF" in response.content
    assert_strict(response)


@pytest.mark.urls(__name__)
def test_the_debug_pages_allow_no_other_style(settings):
    # The hashes come from Django's templates: an error that puts its own <style> into the page is not styled.
    settings.DEBUG = True
    response = Client(raise_request_exception=False).get("/<style>x{}</style>/", HTTP_ACCEPT="text/html")
    assert response.status_code == 404
    assert _sha256("x{}") not in policy(response)["style-src"]


async def _asgi(path: str, *, method: str = "GET", headers=(), query: bytes = b"") -> tuple[int, dict]:
    from channels.testing import HttpCommunicator

    from project.asgi import application

    communicator = HttpCommunicator(application, method, path, headers=[(b"host", b"127.0.0.1"), *headers])
    communicator.scope["query_string"] = query
    response = await communicator.get_response()
    return response["status"], {k.decode().lower(): v.decode() for k, v in response["headers"]}


@pytest.mark.django_db(transaction=True)
async def test_responses_django_makes_before_its_middleware_carry_the_policy():
    # A query string that is no UTF-8 is refused while the request is built, before any middleware.
    status, headers = await _asgi("/accounts/login/", query=b"q=\xff")
    assert status == 400
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "unsafe" not in headers["content-security-policy"]


@pytest.mark.django_db(transaction=True)
async def test_a_page_through_the_asgi_app_has_one_policy_with_its_nonce():
    status, headers = await _asgi("/accounts/login/")
    assert status == 200
    assert "'nonce-" in headers["content-security-policy"]
