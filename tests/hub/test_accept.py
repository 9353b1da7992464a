"""The gateway's use case, in process: new input, resumes, replays, and every refusal leaving nothing behind."""

import pytest
from ag_ui.core import RunAgentInput
from django.db import connection

from interrupts.hub import accept, decisions, wakeup
from interrupts.hub.refusals import Refusal
from interrupts.models import Decision, Interrupt, Run, Thread
from interrupts.protocol.errors import ContractViolation

from .. import factories as make

pytestmark = pytest.mark.django_db

APPROVAL = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
WORKER = "gateway-worker"


def new_input(thread_id: str, run_id: str = "run-gw-1", **fields) -> RunAgentInput:
    return RunAgentInput.model_validate({
        "threadId": thread_id, "runId": run_id, "state": fields.pop("state", {}),
        "messages": fields.pop("messages", []), "tools": [], "context": [], "forwardedProps": {}, **fields})


def resume_input(interrupt, run_id: str = "run-gw-resume", payload=None, **fields) -> RunAgentInput:
    return new_input(interrupt.run.thread.thread_id, run_id, parentRunId=interrupt.run.run_id, resume=[
        {"interruptId": interrupt.interrupt_id, "status": "resolved",
         "payload": {"approved": True} if payload is None else payload}], **fields)


def waiting(thread=None, iid="int-1", **fields) -> Interrupt:
    """A run of ``thread`` that ended with one pending approval ``iid``."""
    run = make.run(thread, status="interrupted")
    return make.interrupt(run, interrupt_id=iid, response_schema=APPROVAL,
                          raw={"id": iid, "reason": "confirmation", "responseSchema": APPROVAL}, **fields)


# --- new input -----------------------------------------------------------------------------------


def test_new_input_becomes_a_gateway_run_this_worker_streams_and_the_thread_s_record():
    agent, client = make.agent(), make.user()
    messages = [{"id": "m-1", "role": "user", "content": "Deploy"}]
    accepted = accept.accept_input(agent, new_input("t-new", messages=messages, state={"env": "prod"}),
                                   client, WORKER)
    assert accepted.verdict.kind == "new"
    run = accepted.run
    assert (run.run_id, run.status, run.claimed_by, run.origin) == ("run-gw-1", "streaming", WORKER, "gateway")
    assert run.lease_until is not None and run.started_at is not None
    assert run.requested_by == client and run.created_by == client
    assert run.input["messages"] == messages and run.input["state"] == {"env": "prod"}
    thread = Thread.objects.get(thread_id="t-new")
    assert (thread.agent, thread.messages, thread.state) == (agent, messages, {"env": "prod"})


@pytest.mark.django_db(transaction=True)
def test_a_run_the_gateway_streams_itself_wakes_no_supervisor():
    woken = []

    class Listener:
        def wake(self):
            woken.append(True)

        def stop_stream(self, run_pk):
            pass

    before = wakeup.registered()
    wakeup.register(Listener())
    try:
        accept.accept_input(make.agent(), new_input("t-quiet"), make.user(), WORKER)
    finally:
        wakeup.register(before)
    assert woken == []  # the gateway streams it on this very request: nobody else may claim it


def test_new_input_without_state_keeps_the_thread_s_state():
    thread = make.thread(state={"kept": True})
    payload = new_input(thread.thread_id).model_dump()
    payload["state"] = None
    accept.accept_input(thread.agent, RunAgentInput.model_validate(payload), make.user(), WORKER)
    assert Thread.objects.get(pk=thread.pk).state == {"kept": True}


def test_new_input_on_a_thread_with_a_run_in_progress_is_refused():
    thread = make.thread()
    make.run(thread, status="streaming")
    with pytest.raises(Refusal) as refused:
        accept.accept_input(thread.agent, new_input(thread.thread_id,
                                                    messages=[{"id": "m", "role": "user", "content": "x"}]),
                            make.user(), WORKER)
    assert refused.value.code == "RUN_IN_PROGRESS"
    assert Thread.objects.get(pk=thread.pk).messages == []
    assert Run.objects.filter(thread=thread).count() == 1


def test_new_input_on_a_thread_waiting_for_decisions_is_refused():
    interrupt = waiting()
    with pytest.raises(ContractViolation) as refused:
        accept.accept_input(interrupt.run.agent, new_input(interrupt.run.thread.thread_id), make.user(), WORKER)
    assert refused.value.code == "PENDING_INTERRUPTS"


def test_a_thread_of_another_agent_is_refused():
    thread = make.thread()
    with pytest.raises(Refusal) as refused:
        accept.accept_input(make.agent(), new_input(thread.thread_id), make.user(), WORKER)
    assert refused.value.code == "AGENT_MISMATCH"
    assert not Run.objects.exists()


def test_a_run_id_the_thread_already_used_is_refused():
    thread = make.thread()
    make.run(thread, run_id="run-gw-1", status="succeeded")
    with pytest.raises(Refusal) as refused:
        accept.accept_input(thread.agent, new_input(thread.thread_id, "run-gw-1"), make.user(), WORKER)
    assert refused.value.code == "DUPLICATE_RUN_ID"
    assert Run.objects.filter(thread=thread).count() == 1


@pytest.mark.parametrize("thread_id, run_id", [("a thread", "run-1"), ("t-1", "run/1"), ("t-1", "r" * 201)])
def test_ids_that_cannot_be_stored_or_linked_are_refused(thread_id, run_id):
    with pytest.raises(Refusal) as refused:
        accept.accept_input(make.agent(), new_input(thread_id, run_id), make.user(), WORKER)
    assert refused.value.code == "INVALID_ID" and refused.value.status == 400
    assert not Thread.objects.exists()


def test_an_agent_streaming_its_share_refuses_new_input_and_no_thread_is_left(settings):
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 1
    agent = make.agent()
    make.run(make.thread(agent=agent), status="streaming")
    with pytest.raises(Refusal) as refused:
        accept.accept_input(agent, new_input("t-full"), make.user(), WORKER)
    assert refused.value.code == "AGENT_AT_CAPACITY"
    assert not Thread.objects.filter(thread_id="t-full").exists()


# --- resumes and replays -------------------------------------------------------------------------


def test_a_resume_records_the_client_s_decision_and_sends_countersign_s_record():
    thread = make.thread(state={"recorded": True}, messages=[{"id": "m-1", "role": "user", "content": "Go"}])
    interrupt = waiting(thread)
    client = make.user(username="gateway-client")
    sent = resume_input(interrupt, state={"forged": True}, messages=[], tools=[
        {"name": "lookup", "description": "Look something up", "parameters": {"type": "object"}}],
        forwardedProps={"mode": "fast"})
    accepted = accept.accept_input(thread.agent, sent, client, WORKER)
    assert accepted.verdict.kind == "resume"
    run = accepted.run
    assert (run.parent, run.status, run.claimed_by, run.origin) == (interrupt.run, "streaming", WORKER, "gateway")
    assert run.resume_key
    [decision] = Decision.objects.filter(interrupt=interrupt)
    assert (decision.user, decision.comment) == (client, "Answered through the AG-UI gateway.")
    assert Interrupt.objects.get(pk=interrupt.pk).status == "resolved"
    body = run.input
    # The thread's record, not the client's: a forged state could change what the approval does.
    assert body["state"] == {"recorded": True}
    assert body["messages"] == [{"id": "m-1", "role": "user", "content": "Go"}]
    assert body["parentRunId"] == interrupt.run.run_id and body["runId"] == "run-gw-resume"
    # The client's own runtime is kept.
    assert body["tools"][0]["name"] == "lookup" and body["forwardedProps"] == {"mode": "fast"}
    [entry] = body["resume"]
    attested = entry["metadata"]["countersign"]
    assert [d["username"] for d in attested["decisions"]] == ["gateway-client"]


def test_the_same_resume_sent_again_is_a_replay_of_the_first_run():
    interrupt = waiting()
    agent = interrupt.run.agent
    first = accept.accept_input(agent, resume_input(interrupt, "run-first"), make.user(), WORKER).run
    again = accept.accept_input(agent, resume_input(interrupt, "run-retry"), make.user(), WORKER)
    assert again.verdict.kind == "replay" and again.run == first
    assert Run.objects.filter(parent=interrupt.run).count() == 1
    assert Decision.objects.filter(interrupt=interrupt).count() == 1


def test_a_replay_is_never_refused_for_capacity(settings):
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 1
    interrupt = waiting()
    agent = interrupt.run.agent
    first = accept.accept_input(agent, resume_input(interrupt, "run-first"), make.user(), WORKER).run
    assert first.status == "streaming"  # the agent's one stream
    again = accept.accept_input(agent, resume_input(interrupt, "run-retry"), make.user(), WORKER)
    assert again.run == first


def test_a_different_answer_after_the_batch_was_sent_is_refused():
    interrupt = waiting()
    agent = interrupt.run.agent
    accept.accept_input(agent, resume_input(interrupt, "run-first"), make.user(), WORKER)
    with pytest.raises(ContractViolation) as refused:
        accept.accept_input(agent, resume_input(interrupt, "run-other", payload={"approved": False}),
                            make.user(), WORKER)
    assert refused.value.code == "ALREADY_RESOLVED"
    assert Run.objects.filter(parent=interrupt.run).count() == 1


def test_a_resume_under_a_quorum_records_an_approval_and_sends_nothing_yet():
    make.policy(required_approvals=2)
    interrupt = waiting()
    client = make.user()
    accepted = accept.accept_input(interrupt.run.agent, resume_input(interrupt), client, WORKER)
    assert accepted.verdict.kind == "resume" and accepted.run is None
    assert Interrupt.objects.get(pk=interrupt.pk).status == "pending"
    assert [d.user for d in Decision.objects.filter(interrupt=interrupt)] == [client]
    assert not Run.objects.filter(parent=interrupt.run).exists()
    # The second approval, in the inbox, sends the batch: both approvers attested.
    decisions.decide(interrupt, make.user(username="second"), "resolved", {"approved": True})
    [entry] = Run.objects.get(parent=interrupt.run).input["resume"]
    assert len(entry["metadata"]["countersign"]["decisions"]) == 2


def test_a_resume_the_client_may_not_decide_is_refused_and_records_nothing():
    interrupt = waiting()
    with pytest.raises(Refusal) as refused:
        accept.accept_input(interrupt.run.agent, resume_input(interrupt), make.user(reviewer=False), WORKER)
    assert refused.value.code == "NOT_ELIGIBLE"
    assert not Decision.objects.exists()
    assert Interrupt.objects.get(pk=interrupt.pk).status == "pending"


def test_a_resume_of_a_thread_that_keeps_changing_gives_up_with_thread_busy(monkeypatch):
    # Under a quorum, approvals in the inbox leave the interrupt pending but change
    # it: one lands between every check and its lock, so the check never holds.
    make.policy(required_approvals=10)
    interrupt = waiting()
    real = accept.check_input
    checks = []

    def approved_meanwhile(*args, **kwargs):
        checks.append(connection.in_atomic_block)
        decisions.decide(interrupt, make.user(), "resolved", {"approved": True})
        return real(*args, **kwargs)

    monkeypatch.setattr(accept, "check_input", approved_meanwhile)
    client = make.user(username="gateway-client")
    with pytest.raises(Refusal) as refused:
        accept.accept_input(interrupt.run.agent, resume_input(interrupt), client, WORKER)
    assert refused.value.code == "THREAD_BUSY" and refused.value.status == 409
    assert len(checks) == accept.ACCEPT_ATTEMPTS
    assert not Decision.objects.filter(user=client).exists()
    assert not Run.objects.filter(parent=interrupt.run).exists()


def test_a_client_s_input_without_tools_or_context_reaches_the_agent_with_empty_ones():
    # Some agents (TanStack AI's chat()) refuse a RunAgentInput without these arrays.
    agent = make.agent()
    accepted = accept.accept_input(agent, RunAgentInput.model_validate(
        {"threadId": "gw-bare", "runId": "r1", "messages": []}), make.user(), worker="w")
    sent = accepted.run.input
    assert (sent["tools"], sent["context"], sent["forwardedProps"]) == ([], [], {})
