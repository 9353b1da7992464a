"""Refused answers, in process: who may settle one, once, and what each settlement leaves behind."""

from datetime import timedelta

import pytest
from ag_ui.core import RunAgentInput
from django.utils import timezone

from interrupts.hub import accept, decisions, outcomes, refused, runs
from interrupts.hub.refusals import Refusal
from interrupts.hub.trail import chain, verify
from interrupts.models import AuditEntry, Decision, Interrupt, Run
from interrupts.reads import selectors

from .. import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


def refused_batch(count=1, agent=None):
    """An interrupted run with ``count`` interrupts, all approved by a reviewer, whose resume the agent refused."""
    interrupted = make.run(make.thread(agent=agent) if agent else None, status="interrupted")
    asked = [make.interrupt(interrupted, response_schema=SCHEMA,
                            raw={"id": f"int-{n}", "reason": "confirmation", "responseSchema": SCHEMA},
                            interrupt_id=f"int-{n}") for n in range(count)]
    reviewer = make.user()
    for interrupt in asked:
        decisions.decide(interrupt, reviewer, "resolved", {"approved": True})
    resume = interrupted.resumed_by()
    Run.objects.filter(pk=resume.pk).update(status="streaming")
    outcomes.fail(resume, "STALE_APPROVAL", "The approval came too late.")
    resume.refresh_from_db()
    return interrupted, asked, resume, reviewer


def test_a_failed_resume_is_refused_until_settled_and_holds_new_input():
    interrupted, _asked, resume, reviewer = refused_batch()
    assert resume.refused and resume.refusal_text == (
        "The agent refused the answer: STALE_APPROVAL The approval came too late.")
    with pytest.raises(Refusal) as held:
        runs.start_run(interrupted.agent, user=reviewer, thread_id=interrupted.thread.thread_id, message="next")
    assert held.value.code == "ANSWER_REFUSED"


def test_someone_outside_the_policy_may_not_settle_it_but_staff_may():
    interrupted, _asked, resume, _reviewer = refused_batch()
    finance = make.user(username="finance-only")
    make.policy(agent=interrupted.agent, users=[finance], restricted=True)
    outsider = make.user()
    with pytest.raises(Refusal) as refused_outsider:
        refused.close(resume, outsider)
    assert refused_outsider.value.code == "NOT_ELIGIBLE"
    assert Run.objects.get(pk=resume.pk).settlement == ""
    staff = make.user(reviewer=False, is_staff=True)
    refused.close(resume, staff)
    assert Run.objects.get(pk=resume.pk).settled_by == staff


def test_it_is_settled_once():
    _interrupted, _asked, resume, reviewer = refused_batch()
    refused.reopen(resume, reviewer)
    for settle in (refused.resend, refused.reopen, refused.close):
        with pytest.raises(Refusal) as again:
            settle(resume, reviewer)
        assert again.value.code == "ALREADY_SETTLED"


def test_reopening_supersedes_the_answers_and_records_it_and_the_same_answers_make_a_new_resume():
    interrupted, asked, resume, reviewer = refused_batch(count=2)
    before = AuditEntry.objects.count()
    reopened = refused.reopen(resume, reviewer)
    assert {i.interrupt_id for i in reopened} == {"int-0", "int-1"}
    assert set(Interrupt.objects.filter(run=interrupted).values_list("status", flat=True)) == {"pending"}
    assert not Decision.objects.filter(interrupt__run=interrupted, superseded_at__isnull=True).exists()
    kinds = list(AuditEntry.objects.filter(seq__gt=before).values_list("kind", flat=True))
    assert kinds == [chain.SUPERSEDED, chain.SUPERSEDED, refused.SETTLED]
    assert interrupted.resumed_by() is None
    for interrupt in asked:
        decisions.decide(interrupt, reviewer, "resolved", {"approved": True})
    again = interrupted.resumed_by()
    assert again is not None and again.pk != resume.pk and again.resume_key != resume.resume_key
    assert [e["payload"] for e in again.input["resume"]] == [e["payload"] for e in resume.input["resume"]]
    assert verify.verify().ok


def test_resend_queues_one_new_run_with_the_same_answers():
    interrupted, _asked, resume, reviewer = refused_batch()
    again = refused.resend(resume, reviewer)
    assert again.status == "queued" and again.parent_id == interrupted.pk
    assert again.input == {**resume.input, "runId": again.run_id}
    assert not Run.objects.get(pk=resume.pk).refused
    assert interrupted.resumed_by() == again


def test_closing_cancels_the_batch_and_lets_the_thread_go_on():
    interrupted, _asked, resume, reviewer = refused_batch(count=2)
    refused.close(resume, reviewer)
    assert set(Interrupt.objects.filter(run=interrupted).values_list("status", flat=True)) == {"cancelled"}
    started = runs.start_run(interrupted.agent, user=reviewer, thread_id=interrupted.thread.thread_id, message="next")
    assert started.status == "queued"


def fail_again(run):
    Run.objects.filter(pk=run.pk).update(status="streaming")
    outcomes.fail(run, "STALE_APPROVAL", "Still too late.")
    run.refresh_from_db()
    return run


def test_the_same_answers_after_a_refused_resend_and_a_reopen_make_a_new_resume():
    # The red team's finding: the key only counted reopenings, so the first
    # (resent) resume's key came back and the answers were silently dropped.
    interrupted, [asked], first, reviewer = refused_batch()
    again = fail_again(refused.resend(first, reviewer))
    refused.reopen(again, reviewer)
    assert interrupted.resumed_by() is None
    decisions.decide(asked, reviewer, "resolved", {"approved": True})
    third = interrupted.resumed_by()
    assert third is not None and third.pk not in (first.pk, again.pk) and third.status == "queued"


def test_through_the_gateway_too_the_same_answers_after_a_resend_and_a_reopen_are_sent():
    interrupted, [asked], first, reviewer = refused_batch()
    refused.reopen(fail_again(refused.resend(first, reviewer)), reviewer)
    resumed = accept.accept_input(interrupted.agent, RunAgentInput.model_validate({
        "threadId": interrupted.thread.thread_id, "runId": "r-client", "messages": [],
        "resume": [{"interruptId": asked.interrupt_id, "status": "resolved", "payload": {"approved": True}}],
    }), reviewer, worker="w")
    assert resumed.verdict.kind == "resume" and resumed.run.run_id == "r-client"


@pytest.mark.parametrize("how", ["events", "lost"])
def test_answers_the_agent_may_have_acted_on_are_not_sent_again(how):
    _interrupted, _asked, resume, reviewer = refused_batch()
    if how == "events":
        make.event(resume, 90, "TOOL_CALL_RESULT", payload={"type": "TOOL_CALL_RESULT", "messageId": "m",
                                                             "toolCallId": "tc", "content": "wired $1M"})
    else:
        Run.objects.filter(pk=resume.pk).update(error_code="WORKER_LOST")
    with pytest.raises(Refusal) as refused_resend:
        refused.resend(resume, reviewer)
    assert refused_resend.value.code == "MAY_HAVE_ACTED"
    assert Run.objects.get(pk=resume.pk).refused  # still waiting: reopen or close remain
    [listed] = selectors.refused_answers()
    assert listed.acted is True
    refused.close(resume, reviewer)


def test_a_batch_past_its_expiry_is_not_reopened():
    interrupted, [asked], resume, reviewer = refused_batch()
    Interrupt.objects.filter(pk=asked.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(Refusal) as late:
        refused.reopen(resume, reviewer)
    assert late.value.code == "EXPIRED" and Run.objects.get(pk=resume.pk).refused


def test_the_inbox_lists_a_refused_answer_only_to_those_who_may_settle_it():
    interrupted, _asked, resume, _reviewer = refused_batch()
    finance = make.user()
    make.policy(agent=interrupted.agent, users=[finance], restricted=True)
    outsider = make.user()
    assert [r.pk for r in selectors.refused_answers(user=finance)] == [resume.pk]
    assert selectors.refused_answers(user=outsider) == []
    assert [r.pk for r in selectors.refused_answers(user=make.user(reviewer=False, is_staff=True))] == [resume.pk]
