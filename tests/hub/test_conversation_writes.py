"""A streaming run writes its thread's conversation now and then, not with every batch, and nothing reads it short.

Each write is the whole conversation (messages and state): written with every one-token batch of a slow agent,
a thread of 1 MB cost 17 ms a token. The events are in the log as they come; ``events.conversation_of`` folds
what the stored conversation does not hold yet, and a run's end leaves it whole.
"""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from interrupts.hub import events, outcomes, runs
from interrupts.models import Run, Thread
from interrupts.protocol.conversation import fold

from .. import factories as make

pytestmark = pytest.mark.django_db

HISTORY = [{"id": f"h{i}", "role": "user" if i % 2 else "assistant", "content": f"turn {i}"} for i in range(40)]


@pytest.fixture
def clock(monkeypatch):
    """``events``' monotonic clock, moved by hand: writes come by count or by time, never by a sleep."""
    now = [1000.0]
    monkeypatch.setattr(events.time, "monotonic", lambda: now[0])
    return now


def streaming(**thread_fields) -> Run:
    thread = make.thread(messages=list(HISTORY), **thread_fields)
    run = make.run(thread, status=Run.Status.STREAMING, claimed_by="w")
    events.append_many(run, [{"type": "RUN_STARTED", "threadId": thread.thread_id, "runId": run.run_id},
                             {"type": "TEXT_MESSAGE_START", "messageId": "reply", "role": "assistant"}], worker="w")
    return run


def token(n: int) -> events.Received:
    return events.Received("TEXT_MESSAGE_CONTENT", json.dumps(
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "reply", "delta": f"t{n} "}))


def stored(run: Run) -> Thread:
    return Thread.objects.get(pk=run.thread_id)


def everything_folded(run: Run) -> list:
    """The thread's messages as an AG-UI client builds them: every event of its log, from the first."""
    payloads = [p if isinstance(p, dict) else json.loads(p) for p in stored(run).events.filter(from_agent=True)
                .order_by("seq").values_list("payload", flat=True)]
    return fold(payloads, HISTORY).messages


def writes_of_messages(queries) -> int:
    column = connection.ops.quote_name("messages")
    return sum(1 for q in queries if q["sql"].startswith("UPDATE") and f"{column} =" in q["sql"])


def test_a_slow_agent_s_tokens_are_written_into_the_conversation_every_fold_write_events(monkeypatch, clock):
    monkeypatch.setattr(events, "FOLD_WRITE_EVENTS", 4)
    run = streaming()
    with CaptureQueriesContext(connection) as queries:
        for n in range(1, 13):
            events.append_many(run, [token(n)], worker="w")
            thread = stored(run)
            # Whatever was written, a reader has every token so far.
            assert events.conversation_of(thread)[0] == everything_folded(run)
            assert thread.last_seq == 2 + n
    # One write in four batches (the first counts the two events before it), not one a batch.
    assert writes_of_messages(queries.captured_queries) == 3
    thread = stored(run)
    # Written with tokens 2, 6 and 10: what came after is in the log alone.
    assert thread.folded_seq == 12 and thread.messages[-1]["content"] == "".join(f"t{n} " for n in range(1, 11))


def test_a_quiet_stream_s_fold_is_written_once_fold_write_seconds_have_passed(clock):
    run = streaming()
    events.append_many(run, [token(1)], worker="w")
    events.append_many(run, [token(2)], worker="w")
    assert stored(run).messages == HISTORY  # deferred: both tokens are only in the log so far
    clock[0] += events.FOLD_WRITE_SECONDS
    events.append_many(run, [token(3)], worker="w")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq and thread.messages[-1]["content"] == "t1 t2 t3 "


def test_the_run_s_last_batch_writes_what_it_folded(clock):
    run = streaming()
    events.append_many(run, [token(1)], worker="w")
    events.append_many(run, [{"type": "TEXT_MESSAGE_END", "messageId": "reply"},
                             {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id}],
                       worker="w")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq and thread.messages == everything_folded(run)


def test_a_run_failing_between_writes_leaves_its_thread_s_conversation_whole(clock):
    run = streaming()
    events.append_many(run, [token(1)], worker="w")
    events.append_many(run, [token(2)], worker="w")
    assert stored(run).messages == HISTORY  # not written yet
    outcomes.fail(run, "IDLE_TIMEOUT", "The agent went quiet.")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq and thread.messages == everything_folded(run)
    # The next run starts from all of it.
    follow_up = runs.start_run(thread.agent, thread_id=thread.thread_id, message="go on")
    assert follow_up.input["messages"][-2]["content"] == "t1 t2 "


@pytest.mark.parametrize("change", [
    {"type": "STATE_SNAPSHOT", "snapshot": {"step": 1}},
    {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/step", "value": 1}]},
    {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "only", "role": "user", "content": "hi"}]},
    {"type": "ACTIVITY_SNAPSHOT", "messageId": "act", "activityType": "plan", "content": {"step": 1}},
])
def test_what_replaces_or_patches_is_written_with_its_batch(clock, change):
    """Never left for a reader to fold: a JSON Patch is the agent's work, done before any lock is taken."""
    run = streaming()
    events.append_many(run, [token(1)], worker="w")
    events.append_many(run, [events.Received(change["type"], json.dumps(change))], worker="w")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq and thread.messages == everything_folded(run)
    assert thread.state == ({"step": 1} if change["type"].startswith("STATE") else None)


def test_a_large_token_is_written_with_its_batch(clock):
    run = streaming()
    big = json.dumps({"type": "TEXT_MESSAGE_CONTENT", "messageId": "reply", "delta": "x" * events.FOLD_WRITE_BYTES})
    events.append_many(run, [events.Received("TEXT_MESSAGE_CONTENT", big)], worker="w")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq and len(thread.messages[-1]["content"]) == events.FOLD_WRITE_BYTES


def test_a_stream_that_lost_its_carry_folds_on_from_everything_recorded(clock):
    """A process that died between writes: whoever streams on (the same run sent again) starts from the log."""
    run = streaming()
    for n in (1, 2):
        events.append_many(run, [token(n)], worker="w")
    again = Run.objects.get(pk=run.pk)  # no carry: another process's copy of the run
    events.append_many(again, [token(3)], worker="w")
    events.append_many(again, [{"type": "TEXT_MESSAGE_END", "messageId": "reply"},
                               {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id}],
                       worker="w")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq
    assert thread.messages == everything_folded(run) and thread.messages[-1]["content"] == "t1 t2 t3 "


def test_events_that_change_nothing_keep_a_whole_fold_whole_and_a_lagging_one_lagging(clock):
    run = streaming()
    events.append_many(run, [token(1)], worker="w")
    lagging = stored(run)
    events.append_many(run, [events.Received("STEP_STARTED", json.dumps({"type": "STEP_STARTED", "stepName": "s"}))],
                       worker="w")
    events.note(run, "countersign.test", {})
    assert stored(run).folded_seq == lagging.folded_seq < stored(run).last_seq
    assert events.conversation_of(stored(run))[0][-1]["content"] == "t1 "
    outcomes.fail(run, "IDLE_TIMEOUT", "The agent went quiet.")
    events.note(run, "countersign.test", {})
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq  # whole, and a note after it keeps it so


def test_a_chunk_stream_open_is_written_with_every_batch(clock):
    """A fold continued from a write made mid-chunk-stream could not reopen it: such batches are not deferred."""
    run = streaming()
    chunk = {"type": "TEXT_MESSAGE_CHUNK", "messageId": "c1", "role": "assistant", "delta": "a"}
    events.append_many(run, [events.Received("TEXT_MESSAGE_CHUNK", json.dumps(chunk))], worker="w")
    events.append_many(run, [events.Received("TEXT_MESSAGE_CHUNK", json.dumps(
        {"type": "TEXT_MESSAGE_CHUNK", "delta": "b"}))], worker="w")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq and thread.messages[-1]["content"] == "ab"


def test_the_api_shows_a_streaming_thread_s_conversation_whole(client, clock):
    run = streaming()
    events.append_many(run, [token(1)], worker="w")
    assert stored(run).folded_seq < stored(run).last_seq
    client.force_login(make.user())
    shown = client.get(f"/api/threads/{run.thread.thread_id}/").json()
    assert shown["messages"] == everything_folded(run) and shown["messages"][-1]["content"] == "t1 "
