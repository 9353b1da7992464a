"""Login guards every page; the admin covers every model and keeps history read-only."""

import pytest
from django.test import Client
from django.urls import reverse

from interrupts.models import Agent

from .. import factories as make

pytestmark = pytest.mark.django_db


def test_the_login_page_is_served(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert b"csrfmiddlewaretoken" in response.content


@pytest.mark.parametrize("url", ["/", "/inbox/", "/threads/", "/audit/", "/registry/", "/admin/", "/api/docs/"])
def test_pages_send_anonymous_visitors_to_log_in(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert "login" in response["Location"]


def test_a_wrong_password_is_told_and_keeps_you_out(client):
    make.user(username="alice")
    response = client.post(reverse("login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"did not match" in response.content
    assert client.get("/").status_code == 302


def test_logging_in_lands_on_the_inbox_with_the_pending_count(client):
    make.user(username="alice")
    interrupt = make.interrupt()
    make.interrupt(interrupt.run)
    response = client.post(
        reverse("login"), {"username": "alice", "password": "pw-for-tests-only"}, follow=True
    )
    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == "/inbox/"
    assert b'id="pending-badge"' in response.content
    assert b"<title>(2) Inbox" in response.content
    assert b'data-testid="inbox-count">2<' in response.content


@pytest.mark.parametrize("model", ["agent", "thread", "run", "event", "interrupt", "decision"])
def test_every_model_has_a_working_changelist(client, staff, model):
    interrupt = make.interrupt()
    make.event(interrupt.run, seq=1)
    make.decision(interrupt, staff, payload={"approved": True})
    response = client.get(reverse(f"admin:interrupts_{model}_changelist"), {"q": "x"})
    assert response.status_code == 200
    response = client.get(reverse(f"admin:interrupts_{model}_changelist"))
    assert response.status_code == 200


@pytest.mark.parametrize("model", ["event", "decision", "run", "interrupt"])
def test_history_cannot_be_added_or_changed_in_the_admin(client, staff, model):
    interrupt = make.interrupt()
    event = make.event(interrupt.run, seq=1)
    decision = make.decision(interrupt, staff, payload={"approved": True})
    obj = {"event": event, "decision": decision, "run": interrupt.run, "interrupt": interrupt}[model]
    assert client.get(reverse(f"admin:interrupts_{model}_add")).status_code == 403
    change_url = reverse(f"admin:interrupts_{model}_change", args=[obj.pk])
    page = client.get(change_url)
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    assert client.post(change_url, {}).status_code == 403
    assert client.get(reverse(f"admin:interrupts_{model}_delete", args=[obj.pk])).status_code == 403


def test_the_agent_credential_is_never_shown_back(client, staff):
    agent = make.agent(auth_header="Authorization", auth_value="Bearer sk-very-secret-token-1234")
    page = client.get(reverse("admin:interrupts_agent_change", args=[agent.pk]))
    assert page.status_code == 200
    assert b"sk-very-secret" not in page.content
    listing = client.get(reverse("admin:interrupts_agent_changelist"))
    assert b"sk-very-secret" not in listing.content
    assert "••••1234".encode() in listing.content


def test_saving_an_agent_without_retyping_the_credential_keeps_it(client, staff):
    agent = make.agent(auth_header="Authorization", auth_value="Bearer sk-very-secret-token-1234")
    response = client.post(
        reverse("admin:interrupts_agent_change", args=[agent.pk]),
        {"name": agent.name, "url": "http://127.0.0.1:9/new/", "description": "", "auth_header": "Authorization",
         "auth_value": "", "capabilities": "{}"},
    )
    assert response.status_code == 302, response.content
    agent.refresh_from_db()
    assert agent.url == "http://127.0.0.1:9/new/"
    assert agent.auth_value == "Bearer sk-very-secret-token-1234"


def test_a_credential_needs_a_header_name(client, staff):
    response = client.post(
        reverse("admin:interrupts_agent_add"),
        {"name": "needs-header", "url": "http://127.0.0.1:9/", "description": "", "auth_header": "",
         "auth_value": "secret", "capabilities": "{}"},
    )
    assert response.status_code == 200
    assert b"Name the header that carries the credential." in response.content
    assert not Agent.objects.filter(name="needs-header").exists()


def test_api_tokens_are_never_shown_in_full_in_the_admin(client, staff):
    from interrupts.models import APIToken

    key = make.token(make.user(username="machine"))
    row = APIToken.objects.get()
    listing = client.get(reverse("admin:interrupts_apitoken_changelist")).content.decode()
    assert "machine" in listing and f"{key[:15]}…" in listing
    assert key not in listing
    change = client.get(reverse("admin:interrupts_apitoken_change", args=[row.pk])).content.decode()
    assert key not in change and key[:15] in change
    delete = client.get(reverse("admin:interrupts_apitoken_delete", args=[row.pk])).content.decode()
    assert key not in delete


def test_the_admin_issues_a_token_shown_once_and_revokes_it(client, staff):
    from interrupts.models import APIToken

    machine = make.user(username="machine")
    added = client.post(reverse("admin:interrupts_apitoken_add"), {"user": machine.pk, "days": ""}, follow=True)
    row = APIToken.objects.get(user=machine)
    shown = [str(m) for m in added.context["messages"] if "shown this once" in str(m)]
    assert len(shown) == 1
    key = shown[0].rsplit(" ", 1)[1]
    assert key.startswith(row.token_key) and row.expiry is None
    machine_client = Client()  # no session: the token alone
    assert machine_client.get("/api/interrupts/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    assert key not in client.get(reverse("admin:interrupts_apitoken_change", args=[row.pk])).content.decode()
    client.post(reverse("admin:interrupts_apitoken_delete", args=[row.pk]), {"post": "yes"})
    assert machine_client.get("/api/interrupts/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 401


@pytest.mark.parametrize("lookup", ["digest__startswith", "digest", "token_key__startswith", "token_key__regex",
                                    "pk__startswith", "pk__gt"])
def test_the_token_list_cannot_be_asked_about_a_token(client, staff, lookup):
    # Filtering by a prefix answers "1 result" or "0 results": no field of a token is offered to it.
    from interrupts.models import APIToken

    make.token(make.user(username="machine"))
    row = APIToken.objects.get()
    value = row.digest if lookup.startswith(("digest", "pk")) else row.token_key
    url = reverse("admin:interrupts_apitoken_changelist")
    right = client.get(url, {lookup: value[:3]})
    wrong = client.get(url, {lookup: "zzz" if not value.startswith("zzz") else "yyy"})
    assert right.status_code in (302, 400)  # Django's refusal of a disallowed lookup: no list at all
    assert (right.status_code, right.content) == (wrong.status_code, wrong.content)  # nothing to tell them apart
