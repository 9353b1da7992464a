"""Each door (pages, API, admin, command) changes an agent or a policy through hub.agents / hub.policies:
one change, exactly one audit entry, and the trail still verifies."""

import json
from contextlib import contextmanager
from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.urls import reverse

from interrupts.hub import policies
from interrupts.hub.refusals import Refusal
from interrupts.hub.trail import verify
from interrupts.models import Agent, AuditEntry, Policy

from .. import factories as make

pytestmark = pytest.mark.django_db

AGENT = {"name": "ext", "url": "http://127.0.0.1:9/x/", "description": "", "auth_header": "", "auth_value": ""}


@pytest.fixture
def staff(client):
    client.force_login(make.user(is_staff=True, is_superuser=True))
    return client


@contextmanager
def one_entry(kind: str, subject_of):
    """Exactly one entry is appended inside the block: of ``kind``, about ``subject_of()`` (read after)."""
    before = AuditEntry.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    yield
    added = list(AuditEntry.objects.filter(seq__gt=before).values_list("kind", "subject"))
    assert added == [(kind, subject_of())]
    assert verify.verify(save=False).ok


def agent_subject(name: str):
    return lambda: f"agent:{Agent.objects.get(name=name).pk}"


def policy_subject(name: str):
    return lambda: f"policy:{Policy.objects.get(name=name).pk}"


def test_the_pages_write_one_entry_per_change(staff):
    with one_entry("agent.created", agent_subject("ext")):
        assert staff.post(reverse("agent-add"), AGENT).status_code == 200  # the secret, shown once
    with one_entry("agent.changed", agent_subject("ext")):
        staff.post(reverse("agent-edit", args=["ext"]), {**AGENT, "url": "http://127.0.0.1:9/moved/"})
    with one_entry("agent.changed", agent_subject("ext")):
        staff.post(reverse("agent-rotate-secret", args=["ext"]))
    finance, someone = Group.objects.create(name="Finance"), make.user()
    policy = {"name": "pay", "reason": "pay", "tool_name": "", "required_approvals": 1, "groups": [finance.pk],
              "users": [someone.pk]}
    with one_entry("policy.created", policy_subject("pay")):
        assert staff.post(reverse("policy-add"), policy).status_code == 302
    assert Policy.objects.get(name="pay").restricted
    pk = Policy.objects.get(name="pay").pk
    with one_entry("policy.changed", policy_subject("pay")):
        staff.post(reverse("policy-edit", args=[pk]), {**policy, "required_approvals": 2, "users": []})
    with one_entry("policy.deleted", lambda: f"policy:{pk}"):
        staff.post(reverse("policy-delete", args=[pk]))
    assert not Policy.objects.filter(pk=pk).exists()


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


def patch(client, url, body):
    return client.patch(url, json.dumps(body), content_type="application/json")


def test_the_api_writes_one_entry_per_change(staff):
    with one_entry("agent.created", agent_subject("shipper")):
        assert post(staff, "/api/agents/", {"name": "shipper", "url": "http://127.0.0.1:9/"}).status_code == 201
    with one_entry("agent.changed", agent_subject("shipper")):
        assert patch(staff, "/api/agents/shipper/", {"url": "http://127.0.0.1:9/moved/"}).status_code == 200
    with one_entry("agent.changed", agent_subject("shipper")):
        assert post(staff, "/api/agents/shipper/rotate-secret/", {}).status_code == 200
    Group.objects.create(name="Finance")
    with one_entry("policy.created", policy_subject("prod")):
        assert post(staff, "/api/policies/", {"name": "prod", "agent": "shipper", "groups": ["Finance"],
                                              "required_approvals": 2}).status_code == 201
    with one_entry("policy.changed", policy_subject("prod")):
        assert patch(staff, "/api/policies/prod/", {"groups": [], "required_approvals": 1}).status_code == 200
    assert not Policy.objects.get(name="prod").restricted
    pk = Policy.objects.get(name="prod").pk
    with one_entry("policy.deleted", lambda: f"policy:{pk}"):
        assert staff.delete("/api/policies/prod/").status_code == 204
    agent_pk = Agent.objects.get(name="shipper").pk
    with one_entry("agent.deleted", lambda: f"agent:{agent_pk}"):
        assert staff.delete("/api/agents/shipper/").status_code == 204


def test_the_admin_writes_one_entry_per_change(staff):
    with one_entry("agent.created", agent_subject("ext")):
        assert staff.post("/admin/interrupts/agent/add/", AGENT).status_code == 302
    agent = Agent.objects.get(name="ext")
    with one_entry("agent.changed", agent_subject("ext")):
        staff.post(f"/admin/interrupts/agent/{agent.pk}/change/", {**AGENT, "url": "http://127.0.0.1:9/moved/"})
    with one_entry("agent.changed", agent_subject("ext")):
        staff.post("/admin/interrupts/agent/", {"action": "rotate_signing_secret", "_selected_action": [agent.pk]})
    finance = Group.objects.create(name="Finance")
    policy = {"name": "pay", "reason": "pay", "tool_name": "", "required_approvals": 1, "groups": [finance.pk]}
    with one_entry("policy.created", policy_subject("pay")):
        assert staff.post("/admin/interrupts/policy/add/", policy).status_code == 302
    pk, someone = Policy.objects.get(name="pay").pk, make.user()
    with one_entry("policy.changed", policy_subject("pay")):
        assert (
            staff.post(f"/admin/interrupts/policy/{pk}/change/", {**policy, "users": [someone.pk]}).status_code == 302
        )
    with one_entry("policy.deleted", lambda: f"policy:{pk}"):
        staff.post(f"/admin/interrupts/policy/{pk}/delete/", {"post": "yes"})
    with one_entry("agent.deleted", lambda: f"agent:{agent.pk}"):
        staff.post("/admin/interrupts/agent/", {"action": "delete_selected", "_selected_action": [agent.pk],
                                                "post": "yes"})
    assert not Agent.objects.filter(pk=agent.pk).exists()


def test_the_command_writes_one_entry_per_change():
    with one_entry("agent.created", agent_subject("cli")):
        call_command("agents", "add", "cli", "http://127.0.0.1:9/cli/", stdout=StringIO())
    with one_entry("agent.changed", agent_subject("cli")):
        call_command("agents", "rotate-secret", "cli", stdout=StringIO())
    pk = Agent.objects.get(name="cli").pk
    with one_entry("agent.deleted", lambda: f"agent:{pk}"):
        call_command("agents", "remove", "cli", stdout=StringIO())


def test_removing_an_agent_records_its_policies_going_first():
    agent = make.agent(name="gone")
    policy = make.policy(agent=agent, name="its policy")
    before = AuditEntry.objects.order_by("-seq").values_list("seq", flat=True).first()
    call_command("agents", "remove", "gone", stdout=StringIO())
    assert list(AuditEntry.objects.filter(seq__gt=before).values_list("kind", "subject")) == [
        ("policy.deleted", f"policy:{policy.pk}"), ("agent.deleted", f"agent:{agent.pk}")]
    assert verify.verify(save=False).ok


def test_an_auto_approve_rule_switched_on_around_the_trail_is_found():
    setter = make.user(is_superuser=True)
    policy = policies.save(Policy(name="quiet", tool_name="restart"), by=setter)
    assert verify.verify(save=False).ok
    Policy.objects.filter(pk=policy.pk).update(auto_approve=True, auto_approve_by=setter)
    [problem] = verify.verify(save=False).problems
    assert "autoApprove" in problem.message and "autoApproveBy" in problem.message
    # Held to the tier's default even by an entry written before the tier existed (no such key).
    entry = AuditEntry.objects.filter(subject=f"policy:{policy.pk}").get()
    recorded = json.loads(entry.content)["data"]
    for key in ("autoApprove", "autoApproveArgs", "autoApproveBy"):
        recorded.pop(key)
    assert any("autoApprove" in d for d in verify._policy_differs(recorded, {**recorded, "autoApprove": True},
                                                                   policy))


def test_only_someone_the_policy_lets_decide_may_set_its_rule_and_they_answer_for_it():
    outsider, insider = make.user(reviewer=False, is_staff=True), make.user(is_superuser=True)
    with pytest.raises(Refusal) as refused:
        policies.save(Policy(name="auto", auto_approve=True), by=outsider)  # staff, without the right to decide
    assert refused.value.code == "NOT_ELIGIBLE"
    assert not Policy.objects.filter(name="auto").exists()
    policy = policies.save(Policy(name="auto", auto_approve=True), by=insider)
    assert policy.auto_approve_by == insider
    # Saved again unchanged by someone else, its setter stays; its args changed, the one who changed them answers.
    other = make.user(is_superuser=True)
    assert policies.save(policy, by=other).auto_approve_by == insider
    policy.auto_approve_args = {"properties": {"env": {"const": "staging"}}}
    assert policies.save(policy, by=other).auto_approve_by == other
    # What it applies to is part of the rule too: widened by someone else, it is theirs from then on.
    policy.tool_name = "drop_database"
    assert policies.save(policy, by=insider).auto_approve_by == insider
    policy.auto_approve = False
    assert policies.save(policy, by=insider).auto_approve_by is None
