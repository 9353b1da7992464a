"""Bulk decisions: each interrupt decided as if alone, the rest skipped and reported, each batch resumed once."""

import pytest
from rest_framework.test import APIClient

from interrupts.hub import decisions
from interrupts.hub.refusals import Refusal
from interrupts.models import Decision, Interrupt, Run

from .. import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
FORM = {"type": "object", "properties": {"year": {"type": "integer"}}, "required": ["year"]}


def batch(agent, count=1, schema=SCHEMA):
    run = make.run(make.thread(agent=agent), status="interrupted")
    return [make.interrupt(run, interrupt_id=f"int-{n}", response_schema=schema,
                           raw={"id": f"int-{n}", "reason": "confirmation", "responseSchema": schema})
            for n in range(count)]


def loaded(interrupts):
    return list(Interrupt.objects.select_related("run").filter(pk__in=[i.pk for i in interrupts]).order_by("pk"))


def resumes_of(interrupt):
    return Run.objects.filter(parent_id=interrupt.run_id, resume_key__isnull=False).count()


def test_approve_many_skips_what_is_not_the_reviewer_s_to_decide_and_says_why():
    agent = make.agent()
    reviewer = make.user()
    [alone] = batch(agent)
    pair = batch(agent, 2)
    [decided] = batch(agent)
    decisions.decide(decided, make.user(), "resolved", {"approved": True})
    [form] = batch(agent, schema=FORM)
    restricted_agent = make.agent()
    [finance_only] = batch(restricted_agent)
    make.policy(agent=restricted_agent, users=[make.user()], restricted=True)

    done = decisions.decide_many(loaded([alone, *pair, decided, form, finance_only]), reviewer, "approve", "ok")
    assert sorted(d.interrupt_id for d in done.decided) == sorted([alone.pk, pair[0].pk, pair[1].pk])
    assert {i.pk: p.code for i, p in done.skipped} == {
        decided.pk: "ALREADY_DECIDED", form.pk: "NEEDS_PAYLOAD", finance_only.pk: "NOT_ELIGIBLE"}
    assert done.summary.startswith("3 approved, 3 skipped: int-0 (ALREADY_DECIDED)")
    # Each completed batch was resumed once; the pair once, with both answers.
    assert resumes_of(alone) == 1 and resumes_of(pair[0]) == 1
    [resume] = Run.objects.filter(parent_id=pair[0].run_id)
    assert len(resume.input["resume"]) == 2
    assert set(Decision.objects.filter(user=reviewer).values_list("comment", flat=True)) == {"ok"}


def test_a_bulk_decision_never_revises_an_answer_already_given():
    reviewer = make.user()
    [mine] = batch(make.agent())
    decisions.decide(mine, reviewer, "resolved", {"approved": True})
    done = decisions.decide_many(loaded([mine]), reviewer, "reject")
    assert [p.code for _i, p in done.skipped] == ["ALREADY_DECIDED"]
    assert Interrupt.objects.get(pk=mine.pk).status == "resolved"


def test_only_actions_that_need_no_answer_of_their_own_are_bulk():
    with pytest.raises(Refusal) as refused:
        decisions.decide_many([], make.user(), "edit")
    assert refused.value.code == "INVALID_ACTION"


def test_the_api_decides_every_pending_interrupt_matching_a_filter():
    agent, other = make.agent(), make.agent()
    mine = batch(agent, 2) + batch(agent)
    [untouched] = batch(other)
    client = APIClient()
    client.force_authenticate(make.user())
    response = client.post("/api/interrupts/bulk-decide/", {"action": "cancel", "filter": {"agent": agent.name}},
                           format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["summary"] == "3 dismissed" and body["skipped"] == [] and body["more"] == 0
    assert set(Interrupt.objects.filter(pk__in=[i.pk for i in mine]).values_list("status", flat=True)) == {"cancelled"}
    assert Interrupt.objects.get(pk=untouched.pk).status == "pending"


def test_the_api_reports_ids_it_does_not_know_and_refuses_an_unclear_request():
    [asked] = batch(make.agent())
    client = APIClient()
    client.force_authenticate(make.user())
    body = client.post("/api/interrupts/bulk-decide/", {"action": "approve", "ids": [asked.pk, 999999]},
                       format="json").json()
    assert [d["interrupt"] for d in body["decided"]] == ["int-0"]
    assert body["skipped"] == [
        {"id": 999999, "interrupt_id": None, "code": "NOT_FOUND", "detail": "No interrupt 999999."}
    ]
    unclear = client.post("/api/interrupts/bulk-decide/", {"action": "approve"}, format="json")
    assert unclear.status_code == 400
    # An id no 64-bit key can be is a clear refusal, not a database error.
    huge = client.post("/api/interrupts/bulk-decide/", {"action": "approve", "ids": [10**30]}, format="json")
    assert huge.status_code == 400 and "ids" in huge.json()["fields"], huge.content
