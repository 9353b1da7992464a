"""Starting, resuming and stopping runs, in process: the thread gate, the input sent, the wake-up after commit."""

import re

import pytest
from django.db import connection

from interrupts.hub import decisions, runs, wakeup
from interrupts.hub.refusals import Refusal
from interrupts.models import Event, Interrupt, Run, Thread
from interrupts.protocol import signing
from interrupts.protocol.errors import ContractViolation

from .. import factories as make

# Each test in a transaction rolled back at its end (PostgreSQL truncates every table
# after a transactional test: several times slower); those about what happens after
# commit ask for real commits.
pytestmark = pytest.mark.django_db
committed = pytest.mark.django_db(transaction=True)

APPROVAL = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


class Listener:
    """Stands in for a supervisor: notes each wake-up, and whether a transaction was still open then."""

    def __init__(self) -> None:
        self.woken: list[bool] = []
        self.stopped: list[int] = []

    def wake(self) -> None:
        self.woken.append(connection.in_atomic_block)

    def stop_stream(self, run_pk: int) -> None:
        self.stopped.append(run_pk)


@pytest.fixture
def listener():
    before = wakeup.registered()
    heard = Listener()
    wakeup.register(heard)
    yield heard
    wakeup.register(before)


def interrupted_run(thread=None, requested_by=None, **interrupt_fields):
    run = make.run(thread, status="interrupted", requested_by=requested_by)
    iid = interrupt_fields.pop("interrupt_id", "int-1")
    interrupt_fields.setdefault("response_schema", APPROVAL)
    raw = {"id": iid, "reason": "confirmation", "responseSchema": interrupt_fields["response_schema"]}
    return run, make.interrupt(run, interrupt_id=iid, raw=raw, **interrupt_fields)


# --- start_run and the thread gate ---------------------------------------------------------------


def test_a_new_run_carries_the_thread_s_conversation_and_state_plus_the_new_message():
    user = make.user()
    earlier = [{"id": "m-0", "role": "assistant", "content": "Hello."}]
    thread = make.thread(state={"step": 2}, messages=earlier)
    run = runs.start_run(thread.agent, user=user, thread_id=thread.thread_id, message="Go on.",
                         forwarded_props={"mode": "fast"})
    assert run.status == "queued" and run.origin == "hub"
    assert run.created_by == user and run.requested_by == user
    sent = run.input
    assert (sent["threadId"], sent["state"], sent["forwardedProps"]) == (thread.thread_id, {"step": 2},
                                                                        {"mode": "fast"})
    assert sent["messages"][:1] == earlier
    assert [(m["role"], m["content"]) for m in sent["messages"][1:]] == [("user", "Go on.")]
    assert "resume" not in sent and "parentRunId" not in sent
    # The message is the thread's from now on, even if the agent never sends a snapshot.
    assert Thread.objects.get(pk=thread.pk).messages == sent["messages"]


def test_without_a_thread_id_a_thread_is_created_titled_by_the_message():
    agent = make.agent()
    run = runs.start_run(agent, message="Deploy the web app " + "x" * 100)
    assert re.fullmatch(r"thread-[0-9a-f]{32}", run.thread.thread_id)
    assert run.thread.agent == agent
    assert run.thread.title == ("Deploy the web app " + "x" * 100)[:80]
    assert run.input["state"] == {} and run.input["forwardedProps"] == {}


def test_c6_every_run_gets_a_fresh_random_run_id():
    thread = make.thread()
    first = runs.start_run(thread.agent, thread_id=thread.thread_id)
    Run.objects.filter(pk=first.pk).update(status="succeeded")
    second = runs.start_run(thread.agent, thread_id=thread.thread_id)
    assert re.fullmatch(r"run-[0-9a-f]{32}", first.run_id)
    assert first.run_id != second.run_id
    assert first.input["runId"] == first.run_id


def test_c55_each_new_message_gets_an_id_of_its_own_in_the_thread():
    thread = make.thread()
    first = runs.start_run(thread.agent, thread_id=thread.thread_id, message="Same words.")
    Run.objects.filter(pk=first.pk).update(status="succeeded")
    second = runs.start_run(thread.agent, thread_id=thread.thread_id, message="Same words.")
    ids = [m["id"] for m in second.input["messages"]]
    # Both messages travel on the second run, each under its own random id (no structure read from it).
    assert len(ids) == 2 and len(set(ids)) == 2
    assert all(re.fullmatch(r"msg-[0-9a-f]{32}", i) for i in ids)


def test_a_thread_with_a_run_in_progress_refuses_another():
    thread = make.thread(messages=[])
    busy = make.run(thread, status="streaming")
    with pytest.raises(Refusal) as refused:
        runs.start_run(thread.agent, thread_id=thread.thread_id, message="And now?")
    assert refused.value.code == "RUN_IN_PROGRESS" and refused.value.status == 409
    assert busy.run_id in refused.value.message
    # Nothing of the refused input stays: not the run, not the message.
    assert list(Run.objects.filter(thread=thread)) == [busy]
    assert Thread.objects.get(pk=thread.pk).messages == []


def test_a_queued_run_also_holds_the_thread():
    thread = make.thread()
    make.run(thread, status="queued")
    with pytest.raises(Refusal) as refused:
        runs.start_run(thread.agent, thread_id=thread.thread_id)
    assert refused.value.code == "RUN_IN_PROGRESS"


def test_a_thread_waiting_for_decisions_refuses_new_input():
    run, interrupt = interrupted_run()
    with pytest.raises(ContractViolation) as refused:
        runs.start_run(run.agent, thread_id=run.thread.thread_id, message="skip it")
    assert refused.value.code == "PENDING_INTERRUPTS"
    assert Run.objects.filter(thread=run.thread).count() == 1
    # Once it is decided (and its resume has ended) the thread takes input again.
    decisions.decide(interrupt, make.user(), "resolved", {"approved": True})
    Run.objects.filter(parent=run).update(status="succeeded")
    assert runs.start_run(run.agent, thread_id=run.thread.thread_id, message="next").status == "queued"


def test_a_message_is_at_most_max_message_chars():
    agent = make.agent()
    with pytest.raises(Refusal) as refused:
        runs.start_run(agent, message="x" * (runs.MAX_MESSAGE_CHARS + 1))
    assert refused.value.code == "TOO_LARGE" and refused.value.status == 400
    assert not Thread.objects.exists() and not Run.objects.exists()
    assert runs.start_run(agent, message="x" * runs.MAX_MESSAGE_CHARS).input["messages"][-1]["content"] == \
        "x" * runs.MAX_MESSAGE_CHARS


def test_a_thread_of_another_agent_is_refused():
    thread = make.thread()
    other = make.agent()
    with pytest.raises(Refusal) as refused:
        runs.start_run(other, thread_id=thread.thread_id, message="hi")
    assert refused.value.code == "AGENT_MISMATCH"
    assert not Run.objects.exists()


@pytest.mark.parametrize("value", ["", "a/b", "a b", "tab\there", "bell\x07", "x" * 201])
def test_ids_that_cannot_travel_in_a_url_or_column_are_refused(value):
    with pytest.raises(Refusal) as refused:
        runs.check_id("threadId", value)
    assert refused.value.code == "INVALID_ID" and refused.value.status == 400


def test_an_id_of_200_plain_characters_is_taken():
    runs.check_id("runId", "x" * 200)
    runs.check_id("runId", "run-ü.:_-@")


# --- queue_resume --------------------------------------------------------------------------------


@committed
def test_a_resume_is_queued_once_however_often_it_is_asked_for(listener):
    run, interrupt = interrupted_run()
    decisions.decide(interrupt, make.user(), "resolved", {"approved": True})
    [resume] = Run.objects.filter(parent=run)
    assert listener.woken == [False]
    assert runs.queue_resume(run) == resume
    assert runs.queue_resume(run) == resume
    assert Run.objects.filter(parent=run).count() == 1
    assert listener.woken == [False]  # nothing new to stream: no wake-up either


def test_a_resume_carries_its_parent_the_thread_s_record_and_attested_answers():
    requester = make.user(username="requester")
    reviewer = make.user(username="reviewer")
    thread = make.thread(state={"cart": ["book"]},
                         messages=[{"id": "m-1", "role": "user", "content": "Buy it"}])
    run, interrupt = interrupted_run(thread, requested_by=requester)
    decisions.decide(interrupt, reviewer, "resolved", {"approved": True}, metadata={"note": "fine"},
                     comment="looks right")
    resume = Run.objects.get(parent=run)
    sent = resume.input
    assert sent["parentRunId"] == run.run_id and sent["runId"] == resume.run_id != run.run_id
    assert sent["state"] == {"cart": ["book"]}
    assert sent["messages"] == [{"id": "m-1", "role": "user", "content": "Buy it"}]
    # A resume continues its parent's request: the reviewer did not ask for the work.
    assert resume.requested_by == requester and resume.resume_key
    [entry] = sent["resume"]
    assert (entry["interruptId"], entry["status"], entry["payload"]) == ("int-1", "resolved", {"approved": True})
    attested = entry["metadata"].pop(signing.METADATA_KEY)
    assert entry["metadata"] == {"note": "fine"}
    assert [(d["username"], d["action"], d["comment"]) for d in attested["decisions"]] == [
        ("reviewer", "approve", "looks right")]
    assert attested["policy"]["requiredApprovals"] == 1
    assert attested["fingerprint"] == signing.fingerprint(
        thread_id=thread.thread_id, run_id=run.run_id, interrupt_id="int-1", tool_call_id=None,
        status="resolved", payload={"approved": True})
    assert "toolCallId" not in attested  # no tool call: nothing to bind


def test_an_approved_tool_call_is_attested_with_the_args_it_may_run():
    run, interrupt = interrupted_run(tool_call_id="tc-1", tool_name="deleteRepo",
                                     proposed_args={"repo": "acme/web"})
    decisions.decide(interrupt, make.user(), "resolved", {"approved": True})
    [entry] = Run.objects.get(parent=run).input["resume"]
    attested = entry["metadata"]["countersign"]
    assert (attested["toolCallId"], attested["toolName"], attested["args"]) == ("tc-1", "deleteRepo",
                                                                             {"repo": "acme/web"})
    assert attested["fingerprint"] == signing.fingerprint(
        thread_id=run.thread.thread_id, run_id=run.run_id, interrupt_id="int-1", tool_call_id="tc-1",
        status="resolved", payload={"approved": True})


def test_c29_a_rejected_tool_call_binds_no_args_and_says_rejected():
    run, interrupt = interrupted_run(tool_call_id="tc-1", tool_name="deleteRepo", proposed_args={"repo": "x"})
    decisions.decide(interrupt, make.user(), "resolved", {"approved": False})
    [entry] = Run.objects.get(parent=run).input["resume"]
    assert "args" not in entry["metadata"]["countersign"]
    assert entry["metadata"]["countersign"]["decisions"][0]["action"] == "reject"


# --- cancel --------------------------------------------------------------------------------------


def test_only_staff_may_stop_a_run():
    run = make.run(status="streaming")
    with pytest.raises(Refusal) as refused:
        runs.cancel(run, make.user())
    assert refused.value.code == "STAFF_ONLY" and refused.value.status == 403
    assert Run.objects.get(pk=run.pk).status == "streaming"
    assert not Event.objects.filter(run=run).exists()


@committed
def test_a_stopped_run_fails_as_cancelled_by_the_operator_and_closes_its_interrupts(listener):
    operator = make.user(username="ops", is_staff=True)
    run = make.run(status="streaming")
    pending = make.interrupt(run)
    assert runs.cancel(run, operator) is True
    stopped = Run.objects.get(pk=run.pk)
    assert (stopped.status, stopped.error_code, stopped.error_message) == ("failed", "CANCELLED_BY_OPERATOR",
                                                                           "Stopped by ops.")
    [error] = Event.objects.filter(run=run)
    assert (error.type, error.from_agent, error.payload["code"]) == ("RUN_ERROR", False, "CANCELLED_BY_OPERATOR")
    assert Interrupt.objects.get(pk=pending.pk).status == "cancelled"
    assert listener.stopped == [run.pk]  # this process's stream, if any, is told at once
    # The thread takes input again.
    assert runs.start_run(run.agent, thread_id=run.thread.thread_id).status == "queued"


def test_a_queued_run_can_be_stopped_from_the_command_line():
    run = make.run(status="queued")
    assert runs.cancel(run, by="manage.py runs cancel") is True
    assert Run.objects.get(pk=run.pk).error_message == "Stopped by manage.py runs cancel."


def test_a_run_that_already_ended_is_not_stopped_again():
    run = make.run(status="succeeded")
    assert runs.cancel(run, make.user(is_staff=True)) is False
    assert Run.objects.get(pk=run.pk).status == "succeeded"
    assert not Event.objects.filter(run=run).exists()


# --- the wake-up after commit --------------------------------------------------------------------


def probe_inside(monkeypatch, module, name: str, heard: list, fail: bool = False) -> list:
    """Wrap ``module.name``, which runs inside the action's own (durable) transaction; what ``heard`` held then."""
    original, seen = getattr(module, name), []

    def probe(*args, **kwargs):
        found = original(*args, **kwargs)
        seen.append(list(heard))
        if fail:
            raise RuntimeError("the change fails after queueing")
        return found

    monkeypatch.setattr(module, name, probe)
    return seen


@committed
def test_the_supervisor_is_woken_only_once_the_queued_run_is_committed(listener, monkeypatch):
    agent = make.agent()
    seen = probe_inside(monkeypatch, runs, "enqueue", listener.woken)
    run = runs.start_run(agent, message="hi")
    assert seen == [[]]  # not yet: another process could not see the run
    assert listener.woken == [False]
    assert Run.objects.filter(pk=run.pk).exists()


@committed
def test_a_rolled_back_run_wakes_nobody(listener, monkeypatch):
    agent = make.agent()
    probe_inside(monkeypatch, runs, "enqueue", listener.woken, fail=True)
    with pytest.raises(RuntimeError):
        runs.start_run(agent, message="hi")
    assert listener.woken == []
    assert not Run.objects.exists()


@committed
def test_a_queued_resume_wakes_after_the_decision_commits(listener, monkeypatch):
    run, interrupt = interrupted_run()
    seen = probe_inside(monkeypatch, decisions.enqueue, "decided", listener.woken)
    decisions.decide(interrupt, make.user(), "resolved", {"approved": True})
    assert seen == [[]]
    assert listener.woken == [False]


@committed
def test_a_rolled_back_resume_wakes_nobody(listener, monkeypatch):
    run, interrupt = interrupted_run()
    probe_inside(monkeypatch, decisions.enqueue, "decided", listener.woken, fail=True)
    with pytest.raises(RuntimeError):
        decisions.decide(interrupt, make.user(), "resolved", {"approved": True})
    assert listener.woken == []
    assert not Run.objects.filter(parent=run).exists()


@committed
def test_stopping_a_run_tells_the_stream_only_after_commit(listener, monkeypatch):
    run = make.run(status="streaming")
    seen = probe_inside(monkeypatch, runs.outcomes, "fail", listener.stopped, fail=True)
    with pytest.raises(RuntimeError):
        runs.cancel(run, make.user(is_staff=True))
    assert seen == [[]] and listener.stopped == []
    assert Run.objects.get(pk=run.pk).status == "streaming"
