"""The Content-Security-Policy on every page, its nonce, and templates that need nothing inline."""

import re
from pathlib import Path

import pytest
from django.urls import reverse

from . import factories as make

pytestmark = pytest.mark.django_db

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
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
    interrupt = make.interrupt(run, interrupt_id="ask", reason="input_required", response_schema={
        "type": "object", "properties": {"note": {"type": "string", "options": {"inputAttributes": {"onfocus": "x()"}}}}})
    return {
        "inbox": reverse("inbox"), "threads": reverse("threads"), "thread": reverse("thread", args=[thread.thread_id]),
        "audit": reverse("audit"), "agents": reverse("agents"), "agent-edit": reverse("agent-edit", args=["evil"]),
        "agent-add": reverse("agent-add"), "api-docs": reverse("api-docs"), "admin": "/admin/",
        "admin-agent": f"/admin/interrupts/agent/{agent.pk}/change/", "admin-interrupts": "/admin/interrupts/interrupt/",
        "admin-interrupt": f"/admin/interrupts/interrupt/{interrupt.pk}/change/",
        "api": "/api/interrupts/",
    }


def policy(response) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split("; ")}


def test_every_page_type_has_the_policy(client, pages):
    for name, path in pages.items():
        response = client.get(path)
        assert response.status_code == 200, name
        found = policy(response)
        assert found["default-src"] == ["'self'"], name
        assert found["script-src"][0] == "'self'" and all(v.startswith("'nonce-") for v in found["script-src"][1:]), name
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
