"""The REST API's signing secrets (shown on create and rotate, never on reads) and /api/policies/."""

import json

import pytest
from django.contrib.auth.models import Group

from interrupts.models import Agent, Policy

from .. import factories as make

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client):
    client.force_login(make.user(is_staff=True))
    return client


@pytest.fixture
def colleague(client):
    client.force_login(make.user())
    return client


def post(client, url, body=None):
    return client.post(url, json.dumps(body or {}), content_type="application/json")


# --- signing secrets ----------------------------------------------------------


def test_registering_an_agent_answers_its_signing_secret_once(staff):
    created = post(staff, "/api/agents/", {"name": "shipper", "url": "http://127.0.0.1:9/"})
    assert created.status_code == 201
    secret = created.json()["signing_secret"]
    assert secret == Agent.objects.get(name="shipper").signing_secret and secret.startswith("css_")
    # Every read and the update answer leave it out.
    for answer in (staff.get("/api/agents/shipper/"), staff.get("/api/agents/"),
                   staff.patch("/api/agents/shipper/", json.dumps({"description": "d"}),
                               content_type="application/json")):
        assert answer.status_code == 200
        assert secret not in answer.content.decode() and "signing_secret" not in answer.content.decode()


def test_rotating_a_secret_answers_the_new_one_and_the_old_one_is_gone(staff):
    agent = make.agent(name="shipper")
    old = agent.signing_secret
    rotated = post(staff, "/api/agents/shipper/rotate-secret/")
    assert rotated.status_code == 200
    new = rotated.json()["signing_secret"]
    assert new != old and new == Agent.objects.get(pk=agent.pk).signing_secret
    assert list(rotated.json()) == ["signing_secret"]


def test_only_staff_may_rotate_a_secret(colleague):
    agent = make.agent(name="shipper")
    refused = post(colleague, "/api/agents/shipper/rotate-secret/")
    assert refused.status_code == 403
    assert refused.json()["code"] == "PERMISSION_DENIED"
    assert Agent.objects.get(pk=agent.pk).signing_secret == agent.signing_secret


def test_rotating_an_unknown_agent_is_404(staff):
    assert post(staff, "/api/agents/nobody/rotate-secret/").status_code == 404


# --- policies -----------------------------------------------------------------


def test_staff_create_a_policy_by_names_and_everyone_reads_it(staff, django_user_model):
    make.agent(name="releaser")
    Group.objects.create(name="Ops")
    ann = make.user(username="ann")
    body = {"name": "prod", "agent": "releaser", "reason": "countersign:deploy", "groups": ["Ops"],
            "users": ["ann"], "required_approvals": 2, "target_minutes": 30}
    created = post(staff, "/api/policies/", body)
    assert created.status_code == 201, created.json()
    assert created.json() == {**body, "tool_name": "", "allow_self_approval": False, "always_ask": False,
                              "on_expiry": "cancel", "backup_group": None, "auto_approve": False,
                              "auto_approve_args": {}, "auto_approve_by": None, "require_look": False,
                              "require_passkey": False,
                              "created_at": created.json()["created_at"], "updated_at": created.json()["updated_at"]}
    policy = Policy.objects.get(name="prod")
    assert list(policy.users.all()) == [ann] and policy.groups.get().name == "Ops"
    staff.force_login(make.user())  # a colleague, not staff
    assert staff.get("/api/policies/prod/").json()["required_approvals"] == 2
    assert "prod" in [p["name"] for p in staff.get("/api/policies/", {"limit": 100}).json()["results"]]


def test_a_colleague_may_not_write_policies(colleague):
    make.policy(name="p")
    assert post(colleague, "/api/policies/", {"name": "mine"}).status_code == 403
    assert colleague.patch("/api/policies/p/", json.dumps({"required_approvals": 3}),
                           content_type="application/json").status_code == 403
    refused = colleague.delete("/api/policies/p/")
    assert refused.status_code == 403 and refused.json()["code"] == "PERMISSION_DENIED"
    assert Policy.objects.get(name="p").required_approvals == 1


@pytest.mark.parametrize("field, value", [
    ("agent", "nobody"), ("groups", ["Nobody"]), ("users", ["nobody"]),
    ("required_approvals", 0), ("required_approvals", 11),
])
def test_an_unknown_name_or_an_out_of_range_quorum_is_400_naming_the_field(staff, field, value):
    refused = post(staff, "/api/policies/", {"name": "p", field: value})
    assert refused.status_code == 400
    assert refused.json()["code"] == "INVALID_REQUEST" and list(refused.json()["fields"]) == [field]
    assert not Policy.objects.filter(name="p").exists()


@pytest.mark.parametrize("agent_name", [None, "releaser"])
def test_a_second_policy_for_the_same_scope_is_400_not_500(staff, agent_name):
    make.agent(name="releaser")
    assert (
        post(staff, "/api/policies/", {"name": "a", "agent": agent_name, "tool_name": "sendEmail"}).status_code == 201
    )
    refused = post(staff, "/api/policies/", {"name": "b", "agent": agent_name, "tool_name": "sendEmail"})
    assert refused.status_code == 400
    assert "already applies" in refused.json()["fields"]["non_field_errors"][0]
    # A narrower scope is another policy, and is fine.
    assert post(staff, "/api/policies/", {"name": "c", "agent": agent_name, "tool_name": "sendEmail",
                                          "reason": "tool_call"}).status_code == 201


def test_updating_a_policy_into_anothers_scope_is_refused_but_its_own_is_fine(staff):
    make.policy(name="a", reason="x")
    make.policy(name="b", reason="y")
    assert staff.patch("/api/policies/b/", json.dumps({"reason": "x"}),
                       content_type="application/json").status_code == 400
    assert staff.patch("/api/policies/b/", json.dumps({"required_approvals": 3}),
                       content_type="application/json").status_code == 200
    assert staff.delete("/api/policies/a/").status_code == 204
    assert not Policy.objects.filter(name="a").exists() and Policy.objects.get(name="b").required_approvals == 3


# --- manage.py agents ---------------------------------------------------------


def agents_command(*args) -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("agents", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def secret_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("signing secret: ")]
    assert len(lines) == 1, output
    return lines[0].removeprefix("signing secret: ")


def test_agents_add_prints_the_new_secret_once_and_list_never_does():
    secret = secret_line(agents_command("add", "shipper", "http://127.0.0.1:9/"))
    assert secret == Agent.objects.get(name="shipper").signing_secret
    # Changing the agent keeps its secret, and does not print it again.
    assert "signing secret" not in agents_command("add", "shipper", "http://127.0.0.1:10/")
    assert Agent.objects.get(name="shipper").signing_secret == secret
    assert secret not in agents_command("list")


def test_agents_rotate_secret_prints_the_new_one():
    agent = make.agent(name="shipper")
    secret = secret_line(agents_command("rotate-secret", "shipper"))
    assert secret != agent.signing_secret and secret == Agent.objects.get(pk=agent.pk).signing_secret


def test_agents_rotate_secret_of_an_unknown_agent_fails():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No agent named 'nobody'"):
        agents_command("rotate-secret", "nobody")


# --- the admin ----------------------------------------------------------------


@pytest.fixture
def admin_client_(client):
    client.force_login(make.user(is_staff=True, is_superuser=True))
    return client


def test_the_admin_rotates_a_secret_shows_it_once_and_never_lists_secrets(admin_client_):
    agent = make.agent(name="shipper")
    listing = admin_client_.get("/admin/interrupts/agent/")
    assert listing.status_code == 200 and agent.signing_secret not in listing.content.decode()
    rotated = admin_client_.post("/admin/interrupts/agent/", {"action": "rotate_signing_secret",
                                                             "_selected_action": [agent.pk]}, follow=True)
    new = Agent.objects.get(pk=agent.pk).signing_secret
    assert new != agent.signing_secret
    assert f"Signing secret of shipper: {new}" in rotated.content.decode()
    # Shown once: the next page no longer carries it, nor does the change form.
    assert new not in admin_client_.get("/admin/interrupts/agent/").content.decode()
    assert new not in admin_client_.get(f"/admin/interrupts/agent/{agent.pk}/change/").content.decode()


def test_the_admin_lists_policies_and_refuses_a_duplicate_scope(admin_client_):
    make.policy(name="first", reason="tool_call")
    assert "first" in admin_client_.get("/admin/interrupts/policy/").content.decode()
    answer = admin_client_.post("/admin/interrupts/policy/add/", {"name": "second", "reason": "tool_call",
                                                                 "required_approvals": 1})
    assert answer.status_code == 200  # the form again, with the error, not a 500
    assert not Policy.objects.filter(name="second").exists()


def test_only_a_reviewer_may_simulate_a_grant(client):
    agent = make.agent()
    body = {"agent": agent.name, "tool_name": "deploy", "args_schema": {"type": "object"}}
    client.force_login(make.user(reviewer=False))  # logged in, may decide nothing: the replay is work for nobody
    refused = post(client, "/api/grants/simulate/", body)
    assert (refused.status_code, refused.json()["code"]) == (403, "NOT_ELIGIBLE")
    client.force_login(make.user())
    assert post(client, "/api/grants/simulate/", body).status_code == 200
