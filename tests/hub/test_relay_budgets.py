"""What relaying an agent's events costs, counted where it does not vary with the machine: parses of each
event's text, and round trips to the database per recorded batch.

The relay's speed (bench/relay_throughput.py) rests on both: an event is
parsed once, and a batch of events, however many, costs the database the same
few round trips. A change that adds a parse per event, or a statement per
event, fails here before any benchmark would notice.
"""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from pydantic import BaseModel, TypeAdapter

from interrupts.hub import events, streaming
from interrupts.models import Event, Run, Thread

from .. import factories as make
from ..loopback import LoopbackAgent, frame, stream
from ..round_trips import round_trips
from .test_streaming import WORKER, claimed_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("closed_after")]

# Round trips of one batch of streamed tokens recorded mid-run, however many tokens it holds: BEGIN,
# the run's row lock, the thread's next sequence numbers with its messages, the INSERT, COMMIT.
# PostgreSQL takes a batch of COPY_ROWS or more by COPY, which waits for one answer more.
BATCH_TRIPS = {"sqlite": {1: 5, 10: 5, 500: 5}, "postgresql": {1: 5, 10: 5, 500: 6}}


def tokens(count: int) -> list[events.Received]:
    return [events.Received("TEXT_MESSAGE_CONTENT", json.dumps(
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-1", "delta": f"word {n} "}),
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-1", "delta": f"word {n} "}) for n in range(count)]


def test_a_batch_of_events_costs_the_same_round_trips_whatever_its_size():
    run = make.run(status=Run.Status.STREAMING, claimed_by=WORKER)
    events.append_many(run, [events.Received.of({"type": "RUN_STARTED", "threadId": run.thread.thread_id,
                                                 "runId": run.run_id}),
                             events.Received.of({"type": "TEXT_MESSAGE_START", "messageId": "m-1",
                                                 "role": "assistant"})], WORKER)
    cost = {}
    for size in (1, 10, 500):
        with round_trips() as trips:
            assert len(events.append_many(run, tokens(size), WORKER)) == size
        cost[size] = trips.count
    assert cost == BATCH_TRIPS[connection.vendor], trips.statements
    assert Event.objects.filter(run=run).count() == 2 + 511


# --- parses per event -------------------------------------------------------------------------------

# Parses of each event's text (or of the dict it decoded to) by the relay, by the kind of event: a
# streamed token is parsed once; an event the thread's conversation folds in whole (a state patch among
# them: its model holds each operation as a model, not as the fold applies it) is parsed, then decoded
# again as the fold reads it.
PARSES = {"TEXT_MESSAGE_CONTENT": 1, "TOOL_CALL_ARGS": 1, "STATE_DELTA": 2, "STEP_STARTED": 2}


class Mixer(LoopbackAgent):
    """Streams ``count`` events of the kind its path names (``/<KIND>-<count>/``) within one run."""

    def answer(self, handler, path, body):
        kind, count = path.rsplit("-", 1)
        ids = {"threadId": body["threadId"], "runId": body["runId"]}
        many = {"TEXT_MESSAGE_CONTENT": {"type": kind, "messageId": "m-1", "delta": "word "},
                "TOOL_CALL_ARGS": {"type": kind, "toolCallId": "tc-1", "delta": '{"a": 1}'},
                "STATE_DELTA": {"type": kind, "delta": [{"op": "add", "path": "/n/-", "value": 2}]},
                "STEP_STARTED": {"type": kind, "stepName": "think"}}[kind]
        stream(handler, [
            frame({"type": "RUN_STARTED", **ids}),
            frame({"type": "TEXT_MESSAGE_START", "messageId": "m-1", "role": "assistant"}),
            frame({"type": "TOOL_CALL_START", "toolCallId": "tc-1", "toolCallName": "noop"}),
            frame({"type": "STATE_SNAPSHOT", "snapshot": {"n": [1]}}),
            b"".join(frame(many) for _ in range(int(count))),
            frame({"type": "TOOL_CALL_END", "toolCallId": "tc-1"}),
            frame({"type": "TEXT_MESSAGE_END", "messageId": "m-1"}),
            frame({"type": "RUN_FINISHED", **ids, "outcome": {"type": "success"}}),
        ])


@pytest.fixture(scope="module")
def mixer():
    served = Mixer().start()
    yield served
    served.stop()


class Parses:
    """Every JSON text decoded and every pydantic validation, in any thread, while installed."""

    def __init__(self, monkeypatch) -> None:
        self.count = 0
        self._monkeypatch = monkeypatch

    def install(self) -> None:
        def counted(method):
            def call(*args, **kwargs):
                self.count += 1
                return method(*args, **kwargs)
            return call

        patch = self._monkeypatch.setattr
        patch(json.JSONDecoder, "decode", counted(json.JSONDecoder.decode))
        for name in ("validate_json", "validate_python"):
            patch(TypeAdapter, name, counted(getattr(TypeAdapter, name)))
        for name in ("model_validate", "model_validate_json"):
            patch(BaseModel, name, classmethod(counted(getattr(BaseModel, name).__func__)))


async def parses_of(mixer, parses, kind: str, count: int) -> int:
    run = await sync_to_async(claimed_run)(f"{mixer.url}/{kind}-{count}/")
    before = parses.count
    await asyncio.wait_for(streaming.stream_run(run.pk, WORKER), 20)
    after = parses.count
    assert await Event.objects.filter(run=run, from_agent=True).acount() == 7 + count
    assert (await Run.objects.aget(pk=run.pk)).status == Run.Status.SUCCEEDED
    # What the events built, as a client folds them: a parse saved must not cost the conversation.
    thread = await Thread.objects.aget(pk=run.thread_id)
    patched = count if kind == "STATE_DELTA" else 0
    assert thread.state == {"n": [1] + [2] * patched}
    text = "word " * count if kind == "TEXT_MESSAGE_CONTENT" else ""
    args = '{"a": 1}' * count if kind == "TOOL_CALL_ARGS" else ""
    said = {m["id"]: m for m in thread.messages}
    assert said["m-1"]["content"] == text
    assert [call["function"] for m in thread.messages for call in m.get("toolCalls", [])] == [
        {"name": "noop", "arguments": args}]
    return after - before


@pytest.mark.parametrize("kind", PARSES)
async def test_each_event_is_parsed_as_often_as_its_kind_needs(mixer, monkeypatch, kind):
    parses = Parses(monkeypatch)
    parses.install()
    few, many = await parses_of(mixer, parses, kind, 5), await parses_of(mixer, parses, kind, 105)
    assert (many - few) / 100 == PARSES[kind]
