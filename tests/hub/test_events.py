"""Recording and resuming, in process: broadcasts after commit, one resume per set of answers."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from interrupts.hub import decisions, events, outcomes, runs
from interrupts.live import relay
from interrupts.models import Interrupt, Run

from .. import factories as make

pytestmark = pytest.mark.django_db(transaction=True)


async def drain(layer, channel) -> list[dict]:
    """Every message waiting on ``channel``."""
    messages = []
    while True:
        try:
            messages.append(await asyncio.wait_for(layer.receive(channel), 0.2))
        except TimeoutError:
            return messages


@pytest.fixture
def listening():
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()

    def subscribe(group):
        async_to_sync(layer.group_add)(group, channel)

    yield subscribe, lambda: async_to_sync(drain)(layer, channel)
    async_to_sync(layer.flush)()


def test_each_recorded_event_is_broadcast_with_its_sequence_number(listening):
    subscribe, received = listening
    run = make.run()
    subscribe(relay.thread_group(run.thread_id))
    events.append_many(run, [{"type": "RUN_STARTED", "threadId": run.thread.thread_id, "runId": run.run_id}])
    events.append_many(run, [{"type": "STATE_SNAPSHOT", "snapshot": {"n": 1}}])
    messages = received()
    assert [(m["seq"], m["event_type"]) for m in messages] == [(1, "RUN_STARTED"), (2, "STATE_SNAPSHOT")]
    run.thread.refresh_from_db()
    assert events.conversation_of(run.thread)[1] == {"n": 1} and run.thread.last_seq == 2


def test_an_interrupt_outcome_raises_interrupts_and_tells_the_inbox(listening):
    subscribe, received = listening
    subscribe(relay.INBOX_GROUP)
    run = make.run(status="streaming")
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
                "outcome": {"type": "interrupt", "interrupts": [
                    {"id": "i-1", "reason": "tool_call", "toolCallId": "tc-a"},
                    {"id": "i-2", "reason": "input_required", "expiresAt": "tomorrow"}]}}
    events.append_many(run, [terminal])
    outcomes.finish(run, terminal, lambda tool_call_id: ("sendEmail", {"to": "x@y.com"}, []))
    first, second = Interrupt.objects.filter(run=run).order_by("pk")
    assert (first.tool_name, first.proposed_args) == ("sendEmail", {"to": "x@y.com"})
    # An unreadable expiry is flagged and due at once, never "no expiry".
    assert [p["code"] for p in second.problems] == ["INVALID_EXPIRY"]
    assert second.expires_at is not None
    assert [m["reason"] for m in received()] == ["raised"]
    assert Run.objects.get(pk=run.pk).status == "interrupted"


def test_the_same_answers_start_one_resume_however_often_they_are_queued():
    reviewer = make.user()
    run = make.run(status="interrupted")
    interrupt = make.interrupt(run, interrupt_id="i-1")
    decisions.decide(interrupt, reviewer, "resolved", {"approved": True})
    resume = Run.objects.get(parent=run)
    assert runs.queue_resume(run) == resume
    assert Run.objects.filter(parent=run).count() == 1
    [entry] = resume.input["resume"]
    attested = entry.pop("metadata")["countersign"]
    assert entry == {"interruptId": "i-1", "status": "resolved", "payload": {"approved": True}}
    assert [d["username"] for d in attested["decisions"]] == [reviewer.username]
    assert resume.input["parentRunId"] == run.run_id


def test_a_decision_with_reserved_metadata_is_refused_and_nothing_is_stored():
    from interrupts.protocol.errors import ContractViolation

    interrupt = make.interrupt()
    with pytest.raises(ContractViolation) as refused:
        decisions.decide(interrupt, make.user(), "resolved", {"approved": True}, metadata={"ag-ui": {}})
    assert refused.value.code == "RESERVED_METADATA_KEY"
    interrupt.refresh_from_db()
    assert interrupt.status == "pending" and not interrupt.decisions.exists()


def test_a_run_settled_elsewhere_keeps_its_end():
    # Another process took the run over (its claim lapsed) and failed it; the
    # original stream's late ending must neither overwrite that nor raise interrupts.
    run = make.run(status="failed")
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
                "outcome": {"type": "interrupt", "interrupts": [{"id": "i-1", "reason": "confirmation"}]}}
    outcomes.finish(run, terminal)
    assert outcomes.fail(run, "LATE", "late") is None
    assert Run.objects.get(pk=run.pk).status == "failed"
    assert not Interrupt.objects.filter(run=run).exists()
    assert not run.events.exists()


def test_deciding_a_batch_locks_it_so_the_last_answer_queues_the_resume():
    reviewer = make.user()
    run = make.run(status="interrupted")
    first, second = make.interrupt(run, interrupt_id="a"), make.interrupt(run, interrupt_id="b")
    decisions.decide(first, reviewer, "resolved", {"approved": True})
    assert not Run.objects.filter(parent=run).exists()
    decisions.decide(second, reviewer, "cancelled")
    assert Run.objects.filter(parent=run).count() == 1


def test_a_new_batch_reusing_ids_and_answers_gets_its_own_resume():
    reviewer = make.user()
    first_run = make.run(status="interrupted")
    decisions.decide(make.interrupt(first_run, interrupt_id="confirm-clear"), reviewer, "resolved", {"confirm": True})
    second_run = make.run(first_run.thread, status="interrupted")
    decisions.decide(make.interrupt(second_run, interrupt_id="confirm-clear"), reviewer, "resolved", {"confirm": True})
    first_resume, second_resume = Run.objects.get(parent=first_run), Run.objects.get(parent=second_run)
    assert first_resume != second_resume and first_resume.resume_key != second_resume.resume_key


def test_a_state_delta_is_applied_outside_the_transaction_and_a_copy_bomb_changes_nothing(monkeypatch):
    from django.db import connection

    seen = []
    real = events.conversation.fold

    def noted(*args, **kwargs):
        seen.append(connection.in_atomic_block)
        return real(*args, **kwargs)

    monkeypatch.setattr(events.conversation, "fold", noted)
    run = make.run(status="streaming")
    events.append_many(run, [{"type": "STATE_SNAPSHOT", "snapshot": {"a": [1, 2, 3]}},
                                {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b", "value": 1}]}])
    bomb = [{"op": "copy", "from": "", "path": f"/k{n}"} for n in range(40)]
    seqs = events.append_many(run, [{"type": "STATE_DELTA", "delta": bomb},
                                       {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/b", "value": 2}]}])
    assert seen == [False, False]  # one fold per batch, neither inside the transaction
    run.thread.refresh_from_db()
    assert run.thread.state == {"a": [1, 2, 3], "b": 2}  # the bomb was refused; the next delta applied
    assert len(seqs) == 2 and run.events.count() == 4  # every event is still in the log


def test_agent_text_longer_than_its_column_is_cut_and_flagged_and_kept_whole_as_sent():
    # PostgreSQL refuses a varchar over its length (SQLite does not): an agent's
    # 5,000-character reason once failed the whole run there.
    run = make.run(status="streaming")
    long_reason, long_tool = "r" * 5000, "t" * 300
    raw = {"id": "i-long", "reason": long_reason, "toolCallId": "tc-1"}
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
                "outcome": {"type": "interrupt", "interrupts": [raw]}}
    outcomes.finish(run, terminal, lambda _id: (long_tool, {}, []))
    [interrupt] = Interrupt.objects.filter(run=run)
    assert len(interrupt.reason) == 200 and interrupt.reason.endswith("…")
    assert len(interrupt.tool_name) == 200
    assert [p["code"] for p in interrupt.problems] == ["FIELD_TOO_LONG", "FIELD_TOO_LONG"]
    assert interrupt.raw["reason"] == long_reason


@pytest.mark.parametrize("field", ["id", "toolCallId"])
def test_an_interrupt_id_too_long_to_echo_fails_the_run_with_a_code(field):
    from ag_ui.core import RunFinishedEvent, RunStartedEvent

    from interrupts.hub.streaming import unrecordable
    from interrupts.protocol.lifecycle import RunLifecycle

    item = {"id": "i-1", "reason": "tool_call", "toolCallId": "tc-1", field: "x" * 201}
    lifecycle = RunLifecycle("t", "r")
    lifecycle.accept(RunStartedEvent(thread_id="t", run_id="r"))
    lifecycle.accept(RunFinishedEvent.model_validate(
        {"threadId": "t", "runId": "r", "outcome": {"type": "interrupt", "interrupts": [item]}}))
    code, message = unrecordable(lifecycle.interrupts)
    assert code == "ID_TOO_LONG" and "201 characters" in message


def test_a_doubtful_proposal_reaches_the_interrupt_as_a_warning_for_its_reviewer():
    # The lifecycle's doubts about a proposal (a snapshot naming another tool and
    # other args than the stream) used to be computed and dropped.
    from interrupts.hub.streaming import proposals
    from interrupts.protocol.lifecycle import RunLifecycle

    from ..protocol.test_lifecycle import (
        ARGS,
        assistant_calling,
        finished,
        interrupt_outcome,
        proposal,
        snapshot,
        started,
    )

    run = make.run(status="streaming")
    lifecycle = RunLifecycle(run.thread.thread_id, run.run_id)
    terminal = finished(interrupt_outcome("tc-1"), thread_id=run.thread.thread_id, run_id=run.run_id)
    for event in (started(run.thread.thread_id, run.run_id), *proposal("tc-1"),
                  snapshot(assistant_calling("tc-1", "sendMail", '{"to": "evil@x.com"}')), terminal):
        lifecycle.accept(event)
    outcomes.finish(run, terminal.model_dump(by_alias=True, exclude_none=True), proposals(lifecycle, run.thread))
    [interrupt] = Interrupt.objects.filter(run=run)
    assert (interrupt.tool_name, interrupt.proposed_args) == ("sendEmail", ARGS)  # the stream wins
    doubts = [p for p in interrupt.problems if p["code"] == "DOUBTFUL_PROPOSAL"]
    assert len(doubts) == 2 and "'sendMail'" in doubts[0]["message"]
    assert {p["interrupt_id"] for p in doubts} == {"approve-tc-1"}


@pytest.mark.parametrize("count", [3, events.COPY_ROWS + 8])  # PostgreSQL: by INSERT, then by COPY
def test_a_batch_is_stored_in_order_as_the_text_received_and_numbered_after_what_came_before(count):
    from django.db import connection

    run = make.run(status=Run.Status.STREAMING, claimed_by="w")
    events.append_many(run, [{"type": "RUN_STARTED", "threadId": run.thread.thread_id, "runId": run.run_id}], "w")
    texts = [f'{{"type":"TEXT_MESSAGE_CONTENT", "messageId":"m", "delta":"\\u00e9 {n}"}}' for n in range(count)]
    seqs = events.append_many(run, [events.Received("TEXT_MESSAGE_CONTENT", text) for text in texts], "w")
    assert seqs == list(range(2, count + 2))
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq, CAST(payload AS TEXT) FROM interrupts_event WHERE run_id = %s AND seq > 1 "
                       "ORDER BY seq", [run.pk])
        assert cursor.fetchall() == list(zip(seqs, texts, strict=False))
    assert [event.payload["delta"] for event in run.events.filter(seq__gt=1).order_by("seq")] == [
        f"é {n}" for n in range(count)]
    # A run its worker no longer holds takes nothing more.
    assert events.append_many(run, [events.Received("TEXT_MESSAGE_END", '{"type":"TEXT_MESSAGE_END","messageId":"m"}')],
                           "another-worker") is None
    assert run.events.count() == count + 1


def test_c47_a_streamed_tool_call_without_snapshot_is_in_the_thread_and_the_resume():
    """Pydantic AI sends no MESSAGES_SNAPSHOT: the assistant turn is built from its events, batch after batch."""
    thread = make.thread(messages=[{"id": "u1", "role": "user", "content": "Delete acme/web"}])
    run = make.run(thread, status="streaming")
    batches = [
        [{"type": "TEXT_MESSAGE_START", "messageId": "a1", "role": "assistant"}],
        [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "Deleting "}],
        [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "a1", "delta": "it"},
         {"type": "TEXT_MESSAGE_END", "messageId": "a1"},
         {"type": "TOOL_CALL_START", "toolCallId": "tc-1", "toolCallName": "deleteRepo", "parentMessageId": "a1"}],
        [{"type": "TOOL_CALL_ARGS", "toolCallId": "tc-1", "delta": '{"repo": '}],
        [{"type": "TOOL_CALL_ARGS", "toolCallId": "tc-1", "delta": '"acme/web"}'},
         {"type": "TOOL_CALL_END", "toolCallId": "tc-1"},
         # A chunk stream left open at the end of one batch continues in the next.
         {"type": "TEXT_MESSAGE_CHUNK", "messageId": "a2", "delta": "Waiting"}],
        [{"type": "TEXT_MESSAGE_CHUNK", "delta": " for approval"},
         {"type": "ACTIVITY_SNAPSHOT", "messageId": "act", "activityType": "progress", "content": {"step": 1}}],
    ]
    for batch in batches:
        assert events.append_many(run, batch) is not None
    turn = {"id": "a1", "role": "assistant", "content": "Deleting it", "toolCalls": [
        {"id": "tc-1", "type": "function", "function": {"name": "deleteRepo", "arguments": '{"repo": "acme/web"}'}}]}
    thread.refresh_from_db()
    assert thread.messages == [{"id": "u1", "role": "user", "content": "Delete acme/web"}, turn,
                               {"id": "a2", "role": "assistant", "content": "Waiting for approval"},
                               {"id": "act", "role": "activity", "activityType": "progress", "content": {"step": 1}}]
    Run.objects.filter(pk=run.pk).update(status=Run.Status.INTERRUPTED)
    run.refresh_from_db()
    decisions.decide(make.interrupt(run, tool_call_id="tc-1"), make.user(), "resolved", {"approved": True})
    resume = Run.objects.get(parent=run)
    # C53: the resume carries the conversation without activity.
    assert resume.input["messages"] == thread.messages[:3]


def test_c59_a_failed_delta_keeps_the_state_and_the_next_batch_builds_on_it():
    run = make.run(make.thread(state={"n": 1}), status="streaming")
    events.append_many(run, [{"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/x", "value": 1},
                                                            {"op": "test", "path": "/n", "value": 5}]}])
    events.append_many(run, [{"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": 2}]}])
    run.thread.refresh_from_db()
    assert events.conversation_of(run.thread)[1] == {"n": 2}


def test_start_run_sends_the_conversation_without_activity():
    thread = make.thread(messages=[{"id": "u1", "role": "user", "content": "hi"},
                                   {"id": "act", "role": "activity", "activityType": "p", "content": {}}])
    run = runs.start_run(thread.agent, thread_id=thread.thread_id, message="again")
    assert [m["id"] for m in run.input["messages"]][:1] == ["u1"] and len(run.input["messages"]) == 2
    thread.refresh_from_db()
    assert [m["id"] for m in thread.messages][:2] == ["u1", "act"]  # the thread keeps its activity
