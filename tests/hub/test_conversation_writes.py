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
from interrupts.hub import streaming as streamer
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
    # One write in four batches, not one a batch: with tokens 4, 8 and 12.
    assert writes_of_messages(queries.captured_queries) == 3
    thread = stored(run)
    assert thread.folded_seq == 14 and thread.messages[-1]["content"] == "".join(f"t{n} " for n in range(1, 13))
    events.append_many(run, [token(13)], worker="w")
    assert stored(run).folded_seq == 14 < stored(run).last_seq  # in the log alone, until the next write


def test_a_quiet_stream_s_fold_is_written_once_fold_write_seconds_have_passed(clock):
    run = streaming()
    opened = stored(run).messages  # the message's start is written with its batch
    assert opened[-1] == {"id": "reply", "role": "assistant", "content": ""}
    events.append_many(run, [token(1)], worker="w")
    events.append_many(run, [token(2)], worker="w")
    assert stored(run).messages == opened  # deferred: both tokens are only in the log so far
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
    opened = stored(run).messages
    events.append_many(run, [token(1)], worker="w")
    events.append_many(run, [token(2)], worker="w")
    assert stored(run).messages == opened  # not written yet
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
    {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "deploy", "parentMessageId": "reply"},
    {"type": "TOOL_CALL_RESULT", "messageId": "res", "toolCallId": "h1-call", "content": "done"},
    {"type": "TEXT_MESSAGE_END", "messageId": "reply"},
])
def test_any_change_but_a_token_is_written_with_its_batch(clock, change):
    """Never left for a reader to fold, which may be under a lock: a patch is work the agent chooses, and a
    result or a new message may walk the whole conversation. Only tokens wait, each costing its own length."""
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


def test_a_run_ending_on_a_stream_that_lost_its_carry_leaves_its_fold_whole(clock):
    """Sent again after a crash (or a batch retried): the new stream's only batch is its end, and nothing in
    it changes the conversation; the tokens before the crash are still folded in once the run has ended."""
    run = streaming()
    events.append_many(run, [token(1)], worker="w")
    events.append_many(run, [token(2)], worker="w")
    again = Run.objects.get(pk=run.pk)
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id}
    events.append_many(again, [terminal], worker="w")
    outcomes.finish(again, terminal)
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq and thread.messages[-1]["content"] == "t1 t2 "
    follow_up = runs.start_run(thread.agent, thread_id=thread.thread_id, message="go on")
    assert [m.get("content") for m in follow_up.input["messages"][-2:]] == ["t1 t2 ", "go on"]


def test_a_stream_that_lost_its_carry_still_writes_its_fold_when_due(clock):
    run = streaming()
    events.append_many(run, [token(1)], worker="w")
    del run._conversation_carry  # as a retried batch leaves it: its fold is read again when next needed
    step = events.Received("STEP_STARTED", json.dumps({"type": "STEP_STARTED", "stepName": "s"}))
    for _ in range(events.FOLD_WRITE_EVENTS):
        events.append_many(run, [step], worker="w")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq and thread.messages[-1]["content"] == "t1 "


def test_new_input_replaces_a_lagging_fold_once_and_declares_it_whole(clock):
    """Were a fold ever left short at rest, new input builds on the whole conversation and folds nothing twice."""
    run = streaming()
    events.append_many(run, [token(1)], worker="w")
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id}
    events.append_many(run, [{"type": "TEXT_MESSAGE_END", "messageId": "reply"}, terminal], worker="w")
    outcomes.finish(run, terminal)
    whole = stored(run)
    Thread.objects.filter(pk=whole.pk).update(folded_seq=2, messages=HISTORY + [
        {"id": "reply", "role": "assistant", "content": ""}])  # as if the token had never been written
    runs.start_run(whole.agent, thread_id=whole.thread_id, message="go on")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq
    assert [m.get("content") for m in events.conversation_of(thread)[0][-2:]] == ["t1 ", "go on"]


def test_a_batch_retried_after_it_committed_leaves_the_next_one_to_read_the_fold(clock):
    """The connection broke after a deferred token's batch committed: the retry finds it and drops the carry.
    Whatever comes next, however large and whatever it changes, the fold is read and written with it, so a
    run's end never leaves ``settle`` more than a few tokens to fold under its lock."""
    run = streaming()
    before = stored(run).last_seq
    batch = [token(1)]
    events.append_many(run, batch, worker="w")
    run._fold_lags = False  # as the batch before (written) left it: this one's answer never came back
    assert streamer._append(run, batch, "w", before, retrying=True) == [before + 1]
    step = events.Received("CUSTOM", json.dumps({"type": "CUSTOM", "name": "n", "value": 1}))
    terminal = events.Received("RUN_FINISHED", json.dumps(
        {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id}))
    events.append_many(run, [step] * 2000 + [terminal], worker="w")
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq and thread.messages[-1]["content"] == "t1 "


def test_a_run_that_changes_no_message_does_not_rewrite_the_conversation(clock):
    """A run that only pauses (RUN_STARTED, then an interrupt) folds to the same messages: nothing to write."""
    thread = make.thread(messages=list(HISTORY))
    run = make.run(thread, status=Run.Status.STREAMING, claimed_by="w")
    terminal = {"type": "RUN_FINISHED", "threadId": thread.thread_id, "runId": run.run_id}
    with CaptureQueriesContext(connection) as queries:
        events.append_many(run, [{"type": "RUN_STARTED", "threadId": thread.thread_id, "runId": run.run_id}],
                           worker="w")
        events.append_many(run, [terminal], worker="w")
    assert writes_of_messages(queries.captured_queries) == 0
    thread = stored(run)
    assert thread.folded_seq == thread.last_seq == 2 and thread.messages == HISTORY
