"""Streaming a run from a real HTTP agent, in process: what is recorded, in what order, and every way it ends.

The agent is tests/e2e/scripted_agent.py's, served on a loopback port by a
thread of this process; Countersign's side is ``streaming.stream_run`` on the
test's event loop, with the database calls on asgiref's worker thread as under
``manage.py serve``.
"""

import asyncio
import json
import threading

import pytest
from ag_ui.core import RunAgentInput
from asgiref.sync import sync_to_async

from interrupts.hub import decisions, outbox, runs, streaming
from interrupts.models import Event, Interrupt, Run, Thread
from interrupts.protocol import signing
from interrupts.sdk.errors import AgentError
from interrupts.sdk.verify import attested_approvals, check_signature

from .. import factories as make
from ..e2e.scripted_agent import ScriptedAgent, finished, started
from ..loopback import frame, send, stream
from ..waiting import until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("closed_after")]

WORKER = "test-worker"


class Agent(ScriptedAgent):
    """The scripted agent, plus three paths of this module's.

    ``unavailable`` answers 503 (overloaded: not now, rather than no).
    ``chat`` says something, sets state and a conversation, and succeeds.
    ``signed`` checks Countersign's signature over the raw body and each
    resume entry's attestation, as an SDK agent does, with ``secret``: a
    request that fails is answered 401; one that passes gets the ``approve``
    script.
    """

    def __init__(self) -> None:
        super().__init__()
        self.secret = ""
        self.checked: list = []  # per signed request: the attested approvals, or the refusal's code
        self.headers: dict[str, dict] = {}  # by runId

    def answer(self, handler, name, body) -> None:
        self.headers[body["runId"]] = dict(handler.headers)
        if name == "unavailable":
            self.calls[(name, body.get("threadId"))] += 1
            return send(handler, 503, "application/json", json.dumps({"detail": "overloaded"}).encode())
        if name == "chat":
            self.calls[(name, body.get("threadId"))] += 1
            return stream(handler, [
                frame(started(body)),
                frame({"type": "TEXT_MESSAGE_START", "messageId": "m-2", "role": "assistant"}),
                frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-2", "delta": "Hello"}),
                frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-2", "delta": ", world"}),
                frame({"type": "TEXT_MESSAGE_END", "messageId": "m-2"}),
                frame({"type": "STATE_SNAPSHOT", "snapshot": {"greeted": True}}),
                frame({"type": "MESSAGES_SNAPSHOT", "messages": [
                    *body["messages"], {"id": "m-2", "role": "assistant", "content": "Hello, world"}]}),
                frame(finished(body, {"type": "success"})),
            ])
        if name == "broken-after-end":
            # Answered to the end, then the connection breaks: fewer bytes than promised.
            self.calls[(name, body.get("threadId"))] += 1
            data = frame(started(body)) + frame(finished(body, {"type": "success"}))
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.send_header("Content-Length", str(len(data) + 1000))
            handler.end_headers()
            handler.wfile.write(data)
            handler.wfile.flush()
            handler.close_connection = True
            return
        if name == "exact":
            self.calls[(name, body.get("threadId"))] += 1
            return stream(handler, [
                frame(started(body)),
                *(f"data: {text}\n\n".encode() for text in EXACT_TEXTS),
                # One event over two data lines: its text is the lines joined by LF.
                b'data: {"type": "TEXT_MESSAGE_END",\ndata:  "messageId": "m-3"}\n\n',
                frame(finished(body, {"type": "success"})),
            ])
        if name == "signed":
            try:
                check_signature(self.secret, handler.headers.get(signing.SIGNATURE_HEADER), handler.raw_body)
                # The approve script raised int-1 about its tool call tc-1: this agent knows
                # which call each answer must be bound to (Agent.tool_call_ids_for in the SDK).
                approvals = attested_approvals(RunAgentInput.model_validate(body),
                                               lambda _input, _interrupt_id: ["tc-1"]) if body.get("resume") else {}
            except AgentError as refused:
                self.checked.append(refused.code)
                return send(handler, 401, "application/json", json.dumps({"detail": refused.message}).encode())
            self.checked.append(approvals)
            name = "approve"
        super().answer(handler, name, body)


# Spellings jsonb would change (key order, spacing, escapes, number forms), and text beyond ASCII.
EXACT_TEXTS = [
    '{"type":"TEXT_MESSAGE_START","role":"assistant","messageId":"m-3"}',
    '{ "messageId" : "m-3", "type" : "TEXT_MESSAGE_CONTENT", "delta" : "caf\\u00e9 and caf\u00e9 \u2014 \U0001f600" }',
    '{"type":"STATE_SNAPSHOT","snapshot":{"z":1.50,"a":1E2,"m":[true, null,-0]}}',
]


@pytest.fixture(scope="module")
def agent():
    served = Agent().start()
    yield served
    served.stop()


@pytest.fixture(autouse=True)
def quick(settings):
    # An agent that stays open after its terminal event is waited for this long only.
    settings.COUNTERSIGN_AFTER_TERMINAL_GRACE = 0.3
    settings.COUNTERSIGN_IDLE_TIMEOUT = 1.0


def claimed_run(url: str, message: str = "hi", **agent_fields) -> Run:
    """A run started on a new agent at ``url``, claimed by WORKER as the supervisor would."""
    row = make.agent(url=url, **agent_fields)
    run = runs.start_run(row, user=make.user(), message=message)
    assert outbox.claim_due(1, WORKER) == [(run.pk, False)]
    return Run.objects.select_related("thread", "agent").get(pk=run.pk)


async def streamed(run_pk: int) -> list:
    """Stream the run to its end; what the listener was told, in order (its end, None, last)."""
    heard = asyncio.Queue()
    await asyncio.wait_for(streaming.stream_run(run_pk, WORKER, heard), 20)
    told = []
    while not heard.empty():
        told.append(heard.get_nowait())
    return told


@sync_to_async
def log_of(run_pk: int) -> list[tuple[int, str, bool]]:
    return list(Event.objects.filter(run_id=run_pk).order_by("seq").values_list("seq", "type", "from_agent"))


@sync_to_async
def stored(run_pk: int) -> Run:
    return Run.objects.select_related("thread").get(pk=run_pk)


# --- a run that ends as its agent says -----------------------------------------------------------


async def test_a_run_ending_with_an_interrupt_records_every_event_in_order_and_raises_it(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/approve/")
    told = await streamed(run.pk)
    types = ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"]
    assert await log_of(run.pk) == [(seq, kind, True) for seq, kind in enumerate(types, start=1)]
    # The listener (a gateway client, a page) is told each event with its number, then the end.
    assert [(seq, payload["type"]) for seq, payload in told[:-1]] == list(enumerate(types, start=1))
    assert told[-1] is None
    ended = await stored(run.pk)
    assert ended.status == "interrupted" and ended.outcome["type"] == "interrupt"
    assert ended.finished_at is not None and ended.thread.last_seq == 6
    [raised] = await sync_to_async(list)(Interrupt.objects.filter(run_id=run.pk))
    assert (raised.interrupt_id, raised.status, raised.reason) == ("int-1", "pending", "tool_call")
    # The tool call is rebuilt from its streamed deltas.
    assert (raised.tool_call_id, raised.tool_name, raised.proposed_args) == ("tc-1", "deleteRepo",
                                                                            {"repo": "acme/web"})
    assert raised.response_schema["required"] == ["approved"]
    assert agent.calls[("approve", run.thread.thread_id)] == 1


async def test_a_run_answered_to_the_end_stands_when_the_connection_breaks_after(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/broken-after-end/")
    await streamed(run.pk)
    ended = await stored(run.pk)
    assert (ended.status, ended.error_code) == ("succeeded", "")
    assert ended.sent_at is not None  # the delivery record, committed before the request left


async def test_a_run_that_succeeds_keeps_the_agent_s_state_and_conversation(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/chat/", message="Say hello")
    await streamed(run.pk)
    ended = await stored(run.pk)
    assert (ended.status, ended.outcome, ended.error_code) == ("succeeded", {"type": "success"}, "")
    assert [kind for _seq, kind, _ in await log_of(run.pk)] == [
        "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    thread = await sync_to_async(Thread.objects.get)(pk=ended.thread_id)
    assert thread.state == {"greeted": True}
    assert [(m["role"], m["content"]) for m in thread.messages] == [("user", "Say hello"),
                                                                   ("assistant", "Hello, world")]
    assert not await Interrupt.objects.filter(run_id=run.pk).aexists()
    # The thread takes its next input.
    nxt = await sync_to_async(runs.start_run)(run.agent, thread_id=thread.thread_id)
    assert nxt.input["state"] == {"greeted": True}
    assert [m["content"] for m in nxt.input["messages"]] == ["Say hello", "Hello, world"]


# --- faults --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path, code, recorded_first", [
    ("malformed", "MALFORMED_EVENT", ["RUN_STARTED"]),
    ("unknown-type", "MALFORMED_EVENT", ["RUN_STARTED"]),
    ("no-terminal", "INCOMPLETE_STREAM", ["RUN_STARTED", "TEXT_MESSAGE_START"]),
    ("after-end", "AFTER_END", ["RUN_STARTED", "RUN_FINISHED"]),
    ("wrong-run", "RUN_MISMATCH", []),
    ("duplicate-ids", "DUPLICATE_INTERRUPT_ID", ["RUN_STARTED", "RUN_FINISHED"]),
    ("html", "BAD_CONTENT_TYPE", []),
    ("http-422", "HTTP_ERROR", []),
])
async def test_a_faulty_stream_fails_the_run_with_the_hub_s_own_run_error(agent, path, code, recorded_first):
    run = await sync_to_async(claimed_run)(f"{agent.url}/{path}/")
    told = await streamed(run.pk)
    ended = await stored(run.pk)
    assert (ended.status, ended.error_code) == ("failed", code)
    log = await log_of(run.pk)
    # What the agent sent before the fault is kept as the agent's; the ending is Countersign's.
    assert [(kind, mine) for _seq, kind, mine in log] == [(kind, True) for kind in recorded_first] + [
        ("RUN_ERROR", False)]
    assert [seq for seq, _kind, _ in log] == list(range(1, len(log) + 1))
    error = await sync_to_async(lambda: Event.objects.get(run_id=run.pk, type="RUN_ERROR").payload)()
    assert error["code"] == code and error["message"] == ended.error_message
    assert told[-2][1] == error and told[-1] is None
    assert not await Interrupt.objects.filter(run_id=run.pk, status="pending").aexists()


async def test_c1_c8_an_agent_error_before_run_started_is_the_agent_s_failure_not_a_fault(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/error-first/")
    await streamed(run.pk)
    ended = await stored(run.pk)
    # 1.0 lets a stream open with RUN_ERROR: the run failed as the agent said, no fault beside it.
    assert (ended.status, ended.error_code, ended.error_message, ended.fault) == (
        "failed", "BOOM", "exploded early", "")
    assert [(kind, mine) for _seq, kind, mine in await log_of(run.pk)] == [("RUN_ERROR", True)]


async def test_c4_c10_a_run_error_after_an_interrupt_outcome_fails_the_run_and_asks_nobody(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/late-error/")
    await streamed(run.pk)
    ended = await stored(run.pk)
    assert (ended.status, ended.error_code, ended.fault) == ("failed", "COMMIT_FAILED", "")
    log = await log_of(run.pk)
    assert [(kind, mine) for _seq, kind, mine in log][-2:] == [("RUN_FINISHED", True), ("RUN_ERROR", True)]
    assert not await Interrupt.objects.filter(run_id=run.pk).aexists()


async def test_c3_an_outcome_1_0_does_not_define_reads_as_success_with_a_warning(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/unknown-outcome/")
    await streamed(run.pk)
    ended = await stored(run.pk)
    assert ended.status == "succeeded"
    assert "'handoff'" in ended.notice and "(outcome)" in ended.notice
    # The log keeps what the agent sent.
    finished_payload = await sync_to_async(lambda: Event.objects.get(run_id=run.pk, type="RUN_FINISHED").payload)()
    assert finished_payload["outcome"]["type"] == "handoff"


@pytest.mark.parametrize("path, code", [
    ("success-with-interrupts", "MALFORMED_EVENT"),  # C11
    ("owner-mismatch", "OWNER_MISMATCH"),  # C37
])
async def test_c11_c37_a_contradicting_stream_fails_the_run(agent, path, code):
    run = await sync_to_async(claimed_run)(f"{agent.url}/{path}/")
    await streamed(run.pk)
    ended = await stored(run.pk)
    assert (ended.status, ended.error_code) == ("failed", code)
    assert not await Interrupt.objects.filter(run_id=run.pk).aexists()


async def test_c33_c34_a_truncated_run_fails_keeps_what_it_delivered_and_gets_no_run_finished(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/no-terminal/")
    await streamed(run.pk)
    ended = await stored(run.pk)
    # A synthetic failure of Countersign's (C34 allows it), never success and never a RUN_FINISHED (C33).
    assert (ended.status, ended.error_code) == ("failed", "INCOMPLETE_STREAM")
    assert [(kind, mine) for _seq, kind, mine in await log_of(run.pk)] == [
        ("RUN_STARTED", True), ("TEXT_MESSAGE_START", True), ("RUN_ERROR", False)]


async def test_c71_a_capability_declared_false_does_not_stop_the_stream_being_read(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/approve/",
                                           capabilities={"humanInTheLoop": {"interrupts": False}})
    await streamed(run.pk)
    ended = await stored(run.pk)
    # The stream is authoritative: the interrupt it raised waits for people.
    assert ended.status == "interrupted"
    assert await Interrupt.objects.filter(run_id=run.pk, status="pending").acount() == 1


async def test_a_malformed_event_is_kept_raw_in_the_run_error(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/malformed/")
    await streamed(run.pk)
    error = await sync_to_async(lambda: Event.objects.get(run_id=run.pk, type="RUN_ERROR").payload)()
    assert error["rawEvent"] == "{not json"
    assert "invalid event" in error["message"]


async def test_an_agent_that_goes_quiet_fails_with_timeout(agent, settings):
    settings.COUNTERSIGN_IDLE_TIMEOUT = 0.5
    run = await sync_to_async(claimed_run)(f"{agent.url}/silent/")
    await streamed(run.pk)
    ended = await stored(run.pk)
    assert (ended.status, ended.error_code) == ("failed", "TIMEOUT")
    assert [kind for _seq, kind, _ in await log_of(run.pk)] == ["RUN_STARTED", "RUN_ERROR"]


# --- an agent that cannot take the run now ------------------------------------------------------


async def test_an_overloaded_agent_s_run_is_queued_again_with_backoff(agent, settings):
    settings.COUNTERSIGN_RETRY_BASE = 30
    run = await sync_to_async(claimed_run)(f"{agent.url}/unavailable/")
    await streamed(run.pk)
    waiting = await stored(run.pk)
    assert (waiting.status, waiting.claimed_by, waiting.attempts) == ("queued", "", 1)
    assert waiting.last_error == "HTTP_ERROR: The agent answered HTTP 503: overloaded"
    assert waiting.retry_at is not None and waiting.error_code == ""
    # Not a failure: the log notes the try, and no RUN_ERROR ends the run.
    [note] = await sync_to_async(list)(Event.objects.filter(run_id=run.pk))
    assert (note.type, note.payload["name"]) == ("CUSTOM", "countersign.delivery_failed")
    assert note.payload["value"]["attempt"] == 1 and note.payload["value"]["code"] == "HTTP_ERROR"
    assert await sync_to_async(outbox.claim_due)(1, WORKER) == []  # not due before its retry time
    assert agent.calls[("unavailable", run.thread.thread_id)] == 1


async def test_an_agent_unreachable_on_the_last_try_fails_the_run(agent, settings):
    settings.COUNTERSIGN_RETRY_ATTEMPTS = 1
    run = await sync_to_async(claimed_run)(f"{agent.url}/unavailable/")
    await streamed(run.pk)
    ended = await stored(run.pk)
    assert (ended.status, ended.error_code) == ("failed", "AGENT_UNREACHABLE")
    assert ended.error_message.startswith("Gave up after 1 attempts; the last one: The agent answered HTTP 503")


async def test_a_refused_connection_is_retried_too(settings):
    settings.COUNTERSIGN_RETRY_BASE = 30
    run = await sync_to_async(claimed_run)("http://127.0.0.1:9/nobody/")
    await streamed(run.pk)
    waiting = await stored(run.pk)
    assert (waiting.status, waiting.attempts) == ("queued", 1)
    assert waiting.last_error.startswith("CONNECT_ERROR: Could not connect to the agent at http://127.0.0.1:9/")


async def test_a_gateway_run_is_not_retried_its_client_is_waiting(agent):
    @sync_to_async
    def gateway_run():
        row = make.agent(url=f"{agent.url}/unavailable/")
        thread = make.thread(agent=row)
        return make.run(thread, status="streaming", claimed_by=WORKER, origin="gateway")

    run = await gateway_run()
    await streamed(run.pk)
    ended = await stored(run.pk)
    assert (ended.status, ended.error_code, ended.attempts) == ("failed", "HTTP_ERROR", 0)


# --- signed requests -----------------------------------------------------------------------------


async def test_a_resume_is_signed_and_attested_so_the_agent_can_check_both(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/signed/")
    agent.secret = run.agent.signing_secret
    agent.checked.clear()
    await streamed(run.pk)
    assert agent.checked == [{}]  # the new run's signature checked; nothing to attest yet

    @sync_to_async
    def decide_and_claim():
        interrupt = Interrupt.objects.select_related("run").get(run_id=run.pk)
        decisions.decide(interrupt, make.user(username="approver"), "resolved", {"approved": True})
        resume = Run.objects.get(parent_id=run.pk)
        assert outbox.claim_due(1, WORKER) == [(resume.pk, True)]
        return resume

    resume = await decide_and_claim()
    await streamed(resume.pk)
    ended = await stored(resume.pk)
    assert ended.status == "succeeded", ended.error_message
    [approvals] = agent.checked[1:]
    assert [(a.username, a.action) for a in approvals["int-1"]] == [("approver", "approve")]


async def test_a_request_signed_with_another_secret_is_refused_by_the_agent(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/signed/")
    agent.secret = "css_not-this-agent-s-secret"
    agent.checked.clear()
    await streamed(run.pk)
    assert agent.checked == ["BAD_SIGNATURE"]
    ended = await stored(run.pk)
    assert (ended.status, ended.error_code) == ("failed", "HTTP_ERROR")
    assert "401" in ended.error_message


async def test_the_agent_s_credential_travels_in_its_header(agent):
    @sync_to_async
    def run_with_credential():
        return claimed_run(f"{agent.url}/approve/", auth_header="X-Agent-Key", auth_value="k-123")

    run = await run_with_credential()
    await streamed(run.pk)
    headers = agent.headers[run.run_id]
    assert headers["X-Agent-Key"] == "k-123"
    assert headers["Content-Type"] == "application/json" and headers["Accept"] == "text/event-stream"
    assert (await stored(run.pk)).status == "interrupted"


# --- what is stored, and where the work runs ----------------------------------------------------


async def test_an_agent_s_events_are_stored_as_the_exact_text_it_sent(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/exact/")
    told = await streamed(run.pk)
    assert (await stored(run.pk)).status == "succeeded"

    @sync_to_async
    def texts() -> list[tuple[str, object]]:
        from django.db import connection
        with connection.cursor() as cursor:
            cursor.execute("SELECT CAST(payload AS TEXT) FROM interrupts_event WHERE run_id = %s ORDER BY seq",
                           [run.pk])
            kept = [text for (text,) in cursor.fetchall()]
        return list(
            zip(
                kept,
                Event.objects.filter(run_id=run.pk).order_by("seq").values_list("payload", flat=True),
                strict=False,
            )
        )

    rows = await texts()
    sent = [*EXACT_TEXTS, '{"type": "TEXT_MESSAGE_END",\n "messageId": "m-3"}']
    assert [text for text, _payload in rows[1:-1]] == sent
    # Read back, each is the JSON it spells, for every reader (API, history, gateway, listener).
    assert [payload for _text, payload in rows[1:-1]] == [json.loads(text) for text in sent]
    assert [payload for _seq, payload in told[1:-2]] == [json.loads(text) for text in sent]
    thread = await sync_to_async(Thread.objects.get)(pk=run.thread_id)
    assert thread.state == {"z": 1.5, "a": 100.0, "m": [True, None, 0]}


async def test_a_run_streams_while_asgiref_s_shared_thread_is_busy(agent):
    run = await sync_to_async(claimed_run)(f"{agent.url}/chat/")
    # Everything sent to asgiref's thread-sensitive executor outside a request
    # shares one thread; streaming's database work must not queue behind it.
    occupied, release = threading.Event(), threading.Event()

    def hold() -> bool:
        occupied.set()
        return release.wait(10)

    busy = asyncio.ensure_future(sync_to_async(hold)())
    try:
        await until(occupied.is_set)  # the shared thread is taken
        told = await asyncio.wait_for(streaming.stream_run(run.pk, WORKER), 5)
        assert told is None and not busy.done()
    finally:
        release.set()
        await busy
    ended = await stored(run.pk)
    assert (ended.status, ended.thread.last_seq) == ("succeeded", 8)


async def test_a_reader_ahead_of_its_writer_waits_for_it_and_every_event_is_recorded_in_order(agent, monkeypatch):
    monkeypatch.setattr(streaming, "MAX_PENDING", 1)  # the reader waits for the writer after every event
    run = await sync_to_async(claimed_run)(f"{agent.url}/chat/")
    told = await streamed(run.pk)
    types = ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
             "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert await log_of(run.pk) == [(seq, kind, True) for seq, kind in enumerate(types, start=1)]
    assert [(seq, payload["type"]) for seq, payload in told[:-1]] == list(enumerate(types, start=1))
    assert (await stored(run.pk)).status == "succeeded"


@pytest.mark.parametrize("text", [
    '{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"to\\u00e9k"}',
    '{"type":"REASONING_MESSAGE_CONTENT","messageId":"r1","delta":"x","metadata":{"a":null,"b":[1]}}',
    '{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\\"a\\"","subagentRunId":"sub-1","timestamp":5}',
])
def test_a_token_event_read_off_its_parsed_form_folds_as_its_text_does(text):
    from interrupts.protocol.conversation import fold
    from interrupts.protocol.wire import parse_event

    start = {"TEXT_MESSAGE_CONTENT": {"type": "TEXT_MESSAGE_START", "messageId": "m1"},
             "REASONING_MESSAGE_CONTENT": {"type": "REASONING_MESSAGE_START", "messageId": "r1"},
             "TOOL_CALL_ARGS": {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "f"}}
    decoded = json.loads(text)
    light = streaming._delta_payload(decoded["type"], parse_event(text), text)
    assert light is not None and fold([start[decoded["type"]], light]) == fold([start[decoded["type"]], decoded])


@pytest.mark.parametrize("text", [
    '{"type":"TEXT_MESSAGE_CONTENT","message_id":"m1","delta":"x"}',
    '{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"x","subagent_run_id":"sub-1"}',
    # The wire's name found elsewhere (a delta, a rawEvent) is not the key the model read.
    '{"type":"TEXT_MESSAGE_CONTENT","message_id":"m1","delta":"messageId"}',
    '{"type":"TOOL_CALL_ARGS","tool_call_id":"c1","delta":"x","rawEvent":{"toolCallId":1}}',
])
def test_a_token_event_the_model_reads_in_snake_case_is_folded_from_its_text(text):
    """The model takes snake_case too; a fold of the text (a client's, ``events.conversation_of``) does not."""
    from interrupts.protocol.wire import parse_event

    assert streaming._delta_payload(json.loads(text)["type"], parse_event(text), text) is None


# --- the database lost mid-stream ------------------------------------------------------------------


async def test_writes_that_keep_failing_leave_the_run_to_recovery_not_to_a_dead_task(agent, monkeypatch, settings):
    """The database stays out of reach: bounded retries, then the claim lapses and recovery settles it.

    The fault is injected (a real one is tests/e2e/test_crash.py's pg_terminate_backend):
    every append raises the OperationalError a lost connection raises.
    """
    from django.db import OperationalError
    from django.utils import timezone

    from interrupts.hub import events

    settings.COUNTERSIGN_LEASE_SECONDS = 0.3
    monkeypatch.setattr(streaming, "WRITE_RETRY_SECONDS", 0.5)
    tries = []

    def lost(*args, **kwargs):
        tries.append(1)
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(events, "append_many", lost)
    run = await sync_to_async(claimed_run)(f"{agent.url}/chat/")
    told = await streamed(run.pk)  # returns: the task does not die with the error
    assert told == [None] and len(tries) > 1
    monkeypatch.undo()
    left = await stored(run.pk)
    assert left.status == "streaming" and left.sent_at is not None  # nothing recorded as its ending
    # The lease (0.3 s) runs out: nothing renews it any more.
    [lapsed] = await until(lambda: sync_to_async(outbox.lapsed)(timezone.now()), timeout=15)
    assert lapsed.pk == run.pk and await sync_to_async(outbox.take_over)(lapsed, "another")
    await sync_to_async(streaming.recover)(lapsed, "another")
    ended = await stored(run.pk)
    assert (ended.status, ended.error_code) == ("failed", "WORKER_LOST")


# --- a run ended by an operator while it streams -------------------------------------------------


async def test_an_operator_s_ending_reaches_the_listener_when_the_refused_batch_ends_the_writer_late(
        agent, monkeypatch):
    """The heartbeat cancels the reader for the operator; the writer's batch, refused, ends in the same turn.

    Both follow from the operator's commit, so they reach the loop together.
    Forced here: the batch waits on the database thread until the run is
    cancelled and the reader is closing the agent's connection, and that close
    (a few turns of the loop in httpcore) ends in the turn the writer ends in:
    the writer's done callback then runs only after the reader left ``_receive``.
    """
    run = await sync_to_async(claimed_run)(f"{agent.url}/silent/")
    held, release = threading.Event(), threading.Event()
    append, chunks = streaming._append, streaming._chunks

    def held_append(*args, **kwargs):
        held.set()
        release.wait(10)
        return append(*args, **kwargs)

    closing = asyncio.Event()

    async def closed_with_the_writer(response, lifecycle):
        try:
            async for chunk in chunks(response, lifecycle):
                yield chunk
        except asyncio.CancelledError:
            closing.set()
            while not streamer.writer.done():
                await asyncio.sleep(0)  # a turn of the loop at a time, as the close takes them
            raise

    monkeypatch.setattr(streaming, "_append", held_append)
    monkeypatch.setattr(streaming, "_chunks", closed_with_the_writer)
    heard, stop = asyncio.Queue(), asyncio.Event()
    streamer = streaming.RunStreamer(run, WORKER, heard, stop)
    task = asyncio.ensure_future(streamer.stream())
    await until(held.is_set)  # RUN_STARTED's batch is on the database thread; the agent says nothing more
    staff = await sync_to_async(make.user)(is_staff=True)
    assert await sync_to_async(runs.cancel)(await stored(run.pk), staff)
    stop.set()  # what wakeup.stop_stream does after that commit, under manage.py serve
    await asyncio.wait_for(closing.wait(), 5)  # the heartbeat cancelled the reader
    release.set()  # the batch is refused: the run has ended
    await asyncio.wait([task], timeout=10)
    told = []
    while not heard.empty():
        told.append(heard.get_nowait())
    error = await sync_to_async(Event.objects.get)(run_id=run.pk, type="RUN_ERROR")
    # The operator's RUN_ERROR, then the end; the task was not cancelled on its way.
    assert told == [(error.seq, error.payload), None]
    assert error.payload["code"] == "CANCELLED_BY_OPERATOR" and not task.cancelled()
