"""The Agents page's form: labels in words, no offer to remove a credential that is not there, and
capabilities ticked in boxes while the model (and the API) keep one JSON object."""

import pytest
from django.urls import reverse

from interrupts.models import Agent
from interrupts.web.forms import AgentForm

from .. import factories as make

pytestmark = pytest.mark.django_db

POST = {"name": "ext", "url": "http://127.0.0.1:9/x/", "description": "", "auth_header": "", "auth_value": ""}


@pytest.fixture
def staff(client):
    user = make.user(is_staff=True)
    client.force_login(user)
    return user


def test_labels_read_as_words_without_colons(client, staff):
    page = client.get(reverse("agent-add")).content.decode()
    assert '<label for="id_url">URL</label>' in page
    assert "Url" not in page and "URL:" not in page and "Auth header" not in page
    assert '<label for="id_auth_header">Credential header</label>' in page
    assert "<legend>People in the loop</legend>" in page and "Raises interrupts for a person to answer" in page


def test_a_credential_that_does_not_exist_is_not_offered_for_removal(client, staff):
    bare = make.agent(name="bare")
    assert "Remove the stored credential" not in client.get(reverse("agent-edit", args=[bare.name])).content.decode()
    kept = make.agent(name="kept", auth_header="Authorization", auth_value="Bearer sk-1234")
    assert "Remove the stored credential" in client.get(reverse("agent-edit", args=[kept.name])).content.decode()


def test_ticked_capabilities_join_the_json_the_model_keeps(client, staff):
    response = client.post(reverse("agent-add"), {**POST, "cap_humanInTheLoop": ["interrupts", "approveWithEdits"],
                                                  "cap_state": ["snapshots"],
                                                  "capabilities": '{"identity": {"version": "1.2"}}'})
    assert response.status_code == 200  # the signing secret, shown once
    assert Agent.objects.get(name="ext").capabilities == {
        "identity": {"version": "1.2"}, "humanInTheLoop": {"interrupts": True, "approveWithEdits": True},
        "state": {"snapshots": True}}


def test_the_boxes_show_what_is_stored_and_unticking_removes_it(client, staff):
    agent = make.agent(name="caps", capabilities={"humanInTheLoop": {"interrupts": True, "feedback": False},
                                                   "custom": {"x": 1}})
    form = AgentForm(instance=agent)
    assert form.initial["cap_humanInTheLoop"] == ["interrupts"]
    # The JSON field holds the rest only: a box is never said twice.
    assert form.initial["capabilities"] == {"humanInTheLoop": {"feedback": False}, "custom": {"x": 1}}
    response = client.post(reverse("agent-edit", args=[agent.name]), {
        **POST, "name": "caps", "capabilities": '{"humanInTheLoop": {"feedback": false}, "custom": {"x": 1}}'})
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.capabilities == {"humanInTheLoop": {"feedback": False}, "custom": {"x": 1}}


def test_a_post_with_json_alone_keeps_it_and_bad_json_is_a_form_error(client, staff):
    client.post(reverse("agent-add"), {**POST, "capabilities": '{"tools": {"supported": true}}'})
    assert Agent.objects.get(name="ext").capabilities == {"tools": {"supported": True}}
    response = client.post(reverse("agent-add"), {**POST, "name": "ext2", "capabilities": "[1, 2]"})
    assert response.status_code == 200 and "Give a JSON object" in response.content.decode()
    assert not Agent.objects.filter(name="ext2").exists()
    client.post(reverse("agent-add"), {**POST, "name": "ext3", "capabilities": ""})
    assert Agent.objects.get(name="ext3").capabilities == {}
