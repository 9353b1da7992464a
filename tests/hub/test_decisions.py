"""Deciding, in process: agent-supplied data is checked before any lock, and races are settled under it.

Spies wrap the real checks (they still run) and note whether a transaction
was open when they ran: on SQLite any transaction holds the whole database's
write lock, so a hostile schema checked inside one would stall every reviewer.
"""

from datetime import timedelta

import pytest
from ag_ui.core import RunAgentInput
from django.db import connection
from django.utils import timezone

from interrupts.hub import accept, decisions, outcomes
from interrupts.hub.refusals import Refusal
from interrupts.models import Decision, Interrupt, Run
from interrupts.protocol.errors import ContractViolation

from .. import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
          "required": ["approved"]}


def spy(monkeypatch, module, name, before=None):
    """Wrap ``module.name`` so each call records whether a transaction was open; returns the records."""
    real = getattr(module, name)
    seen = []

    def wrapper(*args, **kwargs):
        seen.append(connection.in_atomic_block)
        if before is not None:
            before(len(seen))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return seen


def pending_interrupt(**fields):
    run = make.run(status="interrupted")
    fields.setdefault("response_schema", SCHEMA)
    iid = fields.pop("interrupt_id", "int-1")
    raw = {"id": iid, "reason": "confirmation", "responseSchema": fields["response_schema"]}
    if fields.get("expires_at"):
        raw["expiresAt"] = fields["expires_at"].isoformat()
    return make.interrupt(run, interrupt_id=iid, raw=raw, **fields)


def test_an_answer_is_checked_against_the_schema_with_no_transaction_open(monkeypatch):
    seen = spy(monkeypatch, decisions, "check_entry")
    interrupt = pending_interrupt()
    decision = decisions.decide(interrupt, make.user(), "resolved", {"approved": True, "note": "ok"})
    assert seen == [False]
    assert decision.payload == {"approved": True, "note": "ok"}
    assert Interrupt.objects.get(pk=interrupt.pk).status == "resolved"
    assert Run.objects.filter(parent=interrupt.run, resume_key__isnull=False).count() == 1


def test_a_refused_answer_stores_nothing_and_never_took_the_lock(monkeypatch):
    locked = spy(monkeypatch, decisions, "lock_batch")
    interrupt = pending_interrupt()
    with pytest.raises(ContractViolation) as refused:
        decisions.decide(interrupt, make.user(), "resolved", {"approved": "yes"})
    assert refused.value.code == "INVALID_PAYLOAD"
    assert locked == []
    assert not Decision.objects.exists()
    assert Interrupt.objects.get(pk=interrupt.pk).status == "pending"


def test_a_revision_is_checked_outside_the_lock_too(monkeypatch):
    interrupt = pending_interrupt()
    author = make.user()
    decisions.decide(interrupt, author, "resolved", {"approved": True})
    # The batch was sent by that decision (one interrupt): the author can no longer revise.
    with pytest.raises(Refusal) as refused:
        decisions.decide(interrupt, author, "resolved", {"approved": False})
    assert refused.value.code == "ALREADY_DECIDED"

    run = make.run(status="interrupted")
    first = make.interrupt(run, interrupt_id="a", raw={"id": "a", "reason": "confirmation", "responseSchema": SCHEMA},
                           response_schema=SCHEMA)
    make.interrupt(run, interrupt_id="b", raw={"id": "b", "reason": "confirmation"})
    decisions.decide(first, author, "resolved", {"approved": True})
    seen = spy(monkeypatch, decisions, "check_entry")
    revised = decisions.decide(first, author, "resolved", {"approved": False})
    assert seen == [False]
    assert revised.payload == {"approved": False}
    assert Decision.objects.filter(interrupt=first).count() == 2


def test_someone_elses_decision_is_reported_before_the_answer_is_checked(monkeypatch):
    interrupt = pending_interrupt()
    decisions.decide(interrupt, make.user(username="alice"), "resolved", {"approved": True})
    seen = spy(monkeypatch, decisions, "check_entry")
    with pytest.raises(Refusal) as refused:
        decisions.decide(interrupt, make.user(), "resolved", {"approved": "not even valid"})
    assert refused.value.code == "ALREADY_DECIDED" and refused.value.details["decided_by"] == "alice"
    assert seen == []


def test_an_interrupt_that_expires_while_its_answer_is_checked_is_refused(monkeypatch):
    interrupt = pending_interrupt(expires_at=timezone.now() + timedelta(minutes=5))

    def expire(_calls):
        # The sweep has not run yet; only the stored time has passed.
        Interrupt.objects.filter(pk=interrupt.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    spy(monkeypatch, decisions, "check_entry", before=expire)
    with pytest.raises(Refusal) as refused:
        decisions.decide(interrupt, make.user(), "resolved", {"approved": True})
    assert refused.value.code == "EXPIRED"
    assert not Decision.objects.exists()


def test_interrupts_are_flagged_before_the_run_is_finished_under_the_lock(monkeypatch):
    seen = spy(monkeypatch, outcomes, "interrupt_problems")
    run = make.run(status="streaming")
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
                "outcome": {"type": "interrupt", "interrupts": [
                    {"id": "i-1", "reason": "confirmation", "responseSchema": SCHEMA},
                    {"id": "i-2", "reason": "input_required", "responseSchema": {"type": "nonsense"}}]}}
    outcomes.finish(run, terminal)
    assert seen == [False, False]
    raised = {i.interrupt_id: i for i in Interrupt.objects.filter(run=run)}
    assert raised["i-1"].problems == []
    assert [p["code"] for p in raised["i-2"].problems] == ["INVALID_SCHEMA"]


def gateway_resume(interrupt, payload):
    thread = interrupt.run.thread
    return RunAgentInput.model_validate({
        "threadId": thread.thread_id, "runId": f"run-gw-{interrupt.pk}", "parentRunId": interrupt.run.run_id,
        "state": {}, "messages": [], "tools": [], "context": [], "forwardedProps": {},
        "resume": [{"interruptId": interrupt.interrupt_id, "status": "resolved", "payload": payload}],
    })


def test_a_gateway_resume_is_checked_outside_the_transaction(monkeypatch):
    seen = spy(monkeypatch, accept, "check_input")
    interrupt = pending_interrupt()
    accepted = accept.accept_input(interrupt.run.agent, gateway_resume(interrupt, {"approved": True}), make.user(),
                                 "test-worker")
    assert accepted.verdict.kind == "resume"
    assert seen == [False]
    assert Decision.objects.get(interrupt=interrupt).comment == "Answered through the AG-UI gateway."


def test_an_inbox_answer_landing_while_a_gateway_resume_is_checked_wins(monkeypatch):
    interrupt = pending_interrupt()
    reviewer = make.user(username="inbox-reviewer")

    def answer_in_the_inbox(calls):
        if calls == 1:
            decisions.decide(interrupt, reviewer, "resolved", {"approved": False})

    seen = spy(monkeypatch, accept, "check_input", before=answer_in_the_inbox)
    with pytest.raises(ContractViolation) as refused:
        accept.accept_input(interrupt.run.agent, gateway_resume(interrupt, {"approved": True}), make.user(),
                          "test-worker")
    # Checked once against the pending interrupt, then again against the thread as it now is.
    assert refused.value.code == "ALREADY_RESOLVED"
    assert seen == [False, False]
    assert [d.user.username for d in Decision.objects.filter(interrupt=interrupt)] == ["inbox-reviewer"]
    assert Run.objects.filter(parent=interrupt.run).count() == 1


def test_the_gateway_checks_its_agent_s_capacity_under_the_lock_not_around_the_check(monkeypatch, settings):
    # The agent's limit is counted inside accept_input's own transaction, after
    # the outside check: wrapping the whole of it in a transaction would put the
    # schema checks back under the database's write lock.
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 1
    interrupt = pending_interrupt()
    make.run(make.thread(agent=interrupt.run.agent), status="streaming")
    seen = spy(monkeypatch, accept, "check_input")
    with pytest.raises(Refusal) as refused:
        accept.accept_input(interrupt.run.agent, gateway_resume(interrupt, {"approved": True}), make.user(), "w")
    assert refused.value.code == "AGENT_AT_CAPACITY"
    assert seen == [False]
    assert not Decision.objects.exists()  # nothing left behind: the client may send it again
    assert Interrupt.objects.get(pk=interrupt.pk).status == "pending"


CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}


@pytest.mark.parametrize("payload, action, words", [
    ({"confirm": True}, "approve", "Approved"), ({"confirm": False}, "reject", "Rejected")])
def test_a_yes_no_question_s_answer_is_recorded_as_the_yes_or_no_it_is(payload, action, words):
    from interrupts.rules.words import outcome_words

    interrupt = make.interrupt(make.run(status="interrupted"), reason="confirmation", response_schema=CONFIRM)
    decision = decisions.decide(interrupt, make.user(), "resolved", payload)
    assert (decision.action, outcome_words(decision)) == (action, words)


def test_a_no_to_a_question_needing_two_yeses_ends_it_at_once():
    interrupt = make.interrupt(make.run(status="interrupted"), reason="confirmation", response_schema=CONFIRM)
    make.policy(required_approvals=2)
    decisions.decide(interrupt, make.user(), "resolved", {"confirm": False})
    interrupt.refresh_from_db()
    assert interrupt.status != Interrupt.Status.PENDING


FORM = {"type": "object", "properties": {"build": {"type": "integer"}}, "required": ["build"]}


def test_a_request_with_no_yes_no_field_is_rejected_as_cancelled_and_recorded_as_rejected():
    from interrupts.rules.words import outcome_words

    interrupt = make.interrupt(make.run(status="interrupted"), reason="countersign:deploy", response_schema=FORM)
    answer = decisions.answer_for(interrupt, "reject")
    assert answer == (Decision.Status.CANCELLED, None, "reject")
    decision = decisions.decide(interrupt, make.user(), answer.status, answer.payload, action=answer.action)
    assert (decision.status, decision.action, outcome_words(decision)) == ("cancelled", "reject", "Rejected")
    [resume] = Run.objects.filter(parent_id=interrupt.run_id)
    assert resume.input["resume"] == [{"interruptId": interrupt.interrupt_id, "status": "cancelled",
                                       "metadata": resume.input["resume"][0]["metadata"]}]
    # Dismissing is the other way to send "cancelled", and reads as what it is.
    other = make.interrupt(make.run(status="interrupted"), reason="countersign:deploy", response_schema=FORM)
    dismissed = decisions.decide(other, make.user(), *decisions.answer_for(other, "cancel")[:2])
    assert (dismissed.action, outcome_words(dismissed)) == ("cancel", "Dismissed")


def test_only_a_rejection_sent_as_cancelled_is_recorded_as_chosen():
    interrupt = make.interrupt(make.run(status="interrupted"), reason="confirmation", response_schema=CONFIRM)
    # A caller naming another action than the answer's is not believed: the answer says what it is.
    decision = decisions.decide(interrupt, make.user(), "resolved", {"confirm": True}, action="reject")
    assert decision.action == "approve"
