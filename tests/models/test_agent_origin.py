"""A stored credential never follows an agent to another origin, whichever door changes the URL."""

import io

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from rest_framework.test import APIClient

from interrupts.models import Agent

from .. import factories

pytestmark = pytest.mark.django_db

SECRET = "Bearer stored-secret-1234"
URL = "https://agents.example.com/support/"


@pytest.fixture
def stored():
    return factories.agent(name="support", url=URL, auth_header="Authorization", auth_value=SECRET)


def reread(agent):
    agent.refresh_from_db()
    return agent


# --- the model owns the rule -------------------------------------------------------


@pytest.mark.parametrize("moved", [
    "http://agents.example.com/support/",        # scheme
    "https://evil.example.net/support/",         # host
    "https://agents.example.com:8443/support/",  # port
])
def test_moving_to_another_origin_drops_the_stored_credential(stored, moved):
    stored.url = moved
    stored.save()
    assert stored.credential_dropped
    assert reread(stored).auth_value == ""


@pytest.mark.parametrize("same", [
    "https://agents.example.com/other/path/",
    "https://AGENTS.example.com:443/support/",  # the default port, spelled out; the host's case
])
def test_a_new_path_on_the_same_origin_keeps_it(stored, same):
    stored.url = same
    stored.save()
    assert not stored.credential_dropped
    assert reread(stored).auth_value == SECRET


def test_a_credential_given_in_the_same_change_is_kept(stored):
    stored.url = "https://new.example.org/"
    stored.auth_value = "Bearer fresh-credential-5678"
    stored.save()
    assert not stored.credential_dropped
    assert reread(stored).auth_value == "Bearer fresh-credential-5678"


def test_the_same_credential_given_again_on_purpose_is_kept(stored):
    stored.url = "https://new.example.org/"
    stored.credential_given = True
    stored.save()
    assert reread(stored).auth_value == SECRET


def test_update_fields_cannot_skip_the_rule(stored):
    stored.url = "https://evil.example.net/"
    stored.save(update_fields=["url"])
    assert reread(stored).auth_value == ""


@pytest.mark.parametrize("url", ["ftp://agents.example.com/", "file:///etc/passwd", "gopher://x.example.com/"])
def test_agent_urls_are_http_or_https_only(url):
    agent = Agent(name="odd", url=url)
    with pytest.raises(ValidationError) as refused:
        agent.full_clean()
    assert "http:// or https://" in str(refused.value.message_dict["url"])


# --- the admin's form ----------------------------------------------------------------


def test_the_admin_form_drops_it_and_says_so(client, stored):
    client.force_login(factories.user(is_staff=True, is_superuser=True))
    response = client.post(f"/admin/interrupts/agent/{stored.pk}/change/", {
        "name": "support", "url": "https://evil.example.net/", "description": "", "auth_header": "Authorization",
        "auth_value": "", "capabilities": "{}",
    }, follow=True)
    assert response.status_code == 200
    assert reread(stored).auth_value == ""
    assert any(Agent.CREDENTIAL_DROPPED == str(m) for m in response.context["messages"])


def test_the_agents_page_form_drops_it_and_says_so(client, stored):
    client.force_login(factories.user(is_staff=True))
    response = client.post(f"/registry/{stored.name}/edit/", {
        "name": "support", "url": "https://evil.example.net/", "description": "", "auth_header": "Authorization",
        "auth_value": "", "capabilities": "{}",
    }, follow=True)
    assert response.status_code == 200
    assert reread(stored).auth_value == ""
    assert Agent.CREDENTIAL_DROPPED in response.content.decode()


def test_the_admin_form_keeps_a_credential_typed_with_the_move(client, stored):
    client.force_login(factories.user(is_staff=True, is_superuser=True))
    response = client.post(f"/admin/interrupts/agent/{stored.pk}/change/", {
        "name": "support", "url": "https://evil.example.net/", "description": "", "auth_header": "Authorization",
        "auth_value": SECRET, "capabilities": "{}",
    }, follow=True)
    assert response.status_code == 200
    assert reread(stored).auth_value == SECRET
    assert not any(Agent.CREDENTIAL_DROPPED == str(m) for m in response.context["messages"])


def test_the_admin_form_refuses_a_non_http_url(client, stored):
    client.force_login(factories.user(is_staff=True, is_superuser=True))
    response = client.post(f"/admin/interrupts/agent/{stored.pk}/change/", {
        "name": "support", "url": "ftp://agents.example.com/", "description": "", "auth_header": "Authorization",
        "auth_value": "", "capabilities": "{}",
    })
    assert response.status_code == 200  # the form again, with the error
    assert "Give an http:// or https:// URL." in response.text
    assert reread(stored).url == URL and reread(stored).auth_value == SECRET


# --- the API -----------------------------------------------------------------------------


@pytest.fixture
def staff_api():
    api = APIClient()
    api.force_authenticate(factories.user(is_staff=True))
    return api


def test_an_api_patch_of_the_url_drops_it_and_says_so(staff_api, stored):
    response = staff_api.patch("/api/agents/support/", {"url": "https://evil.example.net/"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["notices"] == [{"code": "CREDENTIAL_DROPPED", "detail": Agent.CREDENTIAL_DROPPED}]
    assert response.json()["credential"] == ""
    assert reread(stored).auth_value == ""


def test_an_api_patch_with_the_credential_keeps_it(staff_api, stored):
    response = staff_api.patch("/api/agents/support/", {"url": "https://evil.example.net/", "auth_value": SECRET},
                               format="json")
    assert response.status_code == 200, response.content
    assert response.json()["notices"] == []
    assert reread(stored).auth_value == SECRET


def test_an_api_patch_on_the_same_origin_keeps_it(staff_api, stored):
    response = staff_api.patch("/api/agents/support/", {"url": "https://agents.example.com/v2/"}, format="json")
    assert response.json()["notices"] == []
    assert reread(stored).auth_value == SECRET


def test_the_api_refuses_a_non_http_url(staff_api):
    response = staff_api.post("/api/agents/", {"name": "odd", "url": "ftp://x.example.com/"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_REQUEST" and "url" in response.json()["fields"]


# --- manage.py agents ---------------------------------------------------------------------


def agents_add(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command("agents", "add", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_command_drops_it_and_says_so(stored):
    out, err = agents_add("support", "https://evil.example.net/")
    assert "Updated agent support" in out
    assert "Credential dropped" in err and "--header" in err
    assert reread(stored).auth_value == ""


def test_the_command_keeps_a_header_given_with_the_move(stored):
    out, err = agents_add("support", "https://evil.example.net/", "--header", f"Authorization:{SECRET}")
    assert err == ""
    assert reread(stored).auth_value == SECRET


def test_the_command_refuses_a_non_http_url():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="http:// or https://"):
        agents_add("odd", "ftp://x.example.com/")
