"""protocol.conversation.fold against the real @ag-ui/client 1.0.0 (DESIGN.md "Test against the real thing").

The same streams go to ``fold`` and to the client's own pipeline (enforcement,
chunk expansion, verification, ``defaultApplyEvents``) run by
tests/protocol/agui_client/reducer.mjs in one node process for the session;
the messages and state must be the same. Streams: every one recorded in the
tests (the scripted agent's paths, the spec's examples, the LangGraph
captures of tests/external/README.md, test_conversation's) and generated
valid ones (hypothesis). Warnings are not compared: where the client is
silent, 1.0 says SHOULD warn (checklist, difference 7).

`make peers` installs the package (npm ci); without node or it the tests
skip, except under CI=true, where that is a failure.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from interrupts.protocol.conversation import fold
from tests import spec_examples
from tests.e2e import scripted_agent

from .test_conversation import STREAMS

PEER = Path(__file__).parent / "agui_client"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def client():
    node = shutil.which("node")
    installed = (PEER / "node_modules" / "@ag-ui" / "client" / "package.json").exists()
    if node is None or not installed:
        why = ("node is not installed" if node is None
               else "@ag-ui/client is not installed (make peers runs npm ci in tests/protocol/agui_client)")
        if os.environ.get("CI") == "true":
            pytest.fail(f"The differential test needs the real client: {why}.")
        pytest.skip(why)
    process = subprocess.Popen([node, "reducer.mjs"], cwd=PEER, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, encoding="utf-8")

    def reduce(events, messages=(), state=None):
        request = {"events": events, "messages": list(messages), **({"state": state} if state is not None else {})}
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
        assert line, "the node reducer stopped"
        return json.loads(line)

    yield reduce
    process.stdin.close()
    process.wait(timeout=10)


def same(left, right) -> bool:
    """JSON equality that tells true from 1 (Python's == does not)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=False))
    return left == right


def check(client, events, messages=(), state=None, *, allow_error=False):
    reply = client(copy.deepcopy(events), copy.deepcopy(list(messages)), copy.deepcopy(state))
    if "error" in reply and not allow_error:
        pytest.fail(f"the client refused the stream: {reply['error']}")
    ours = fold(copy.deepcopy(events), copy.deepcopy(list(messages)), copy.deepcopy(state))
    assert same(ours.messages, reply["messages"]), (ours.messages, reply["messages"])
    assert same(ours.state, reply["state"]), (ours.state, reply["state"])
    return reply


# --------------------------------------------------------------------------- #
# Recorded streams
# --------------------------------------------------------------------------- #

def _scripted_streams():
    body = {"threadId": "t-diff", "runId": "r-diff", "messages": [], "state": {}}
    for name, script in sorted(scripted_agent.SCRIPTS.items()):
        for resume in (None, [{"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}}]):
            try:
                frames = script({**body, **({"resume": resume} if resume else {})})
            except Exception:  # noqa: BLE001  (a path that needs more of a body than this one)
                continue
            events = []
            for frame in frames:
                for line in frame.decode().splitlines():
                    if line.startswith("data: "):
                        try:
                            events.append(json.loads(line[6:]))
                        except ValueError:
                            pass  # the "malformed" path: never an event
            yield f"scripted {name}{' resume' if resume else ''}", events


def _readme_streams():
    """The captured LangGraph streams of tests/external/README.md, without the events it trims (…)."""
    blocks, inside = [], False
    for line in (ROOT / "tests" / "external" / "README.md").read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
            blocks.append([])
        elif inside and line.startswith("data: "):
            try:
                blocks[-1].append(json.loads(line[6:]))
            except ValueError:
                pass
    for number, events in enumerate(block for block in blocks if block):
        yield f"README capture {number}", events


RECORDED = [*_scripted_streams(), *_readme_streams(),
            *((f"spec example {i}", [event]) for i, event in enumerate(spec_examples.EVENTS))]
# Streams the client refuses on its own (verification), which the hub's lifecycle refuses as well:
# only the messages built before the refusal are compared.
REFUSED_BY_CLIENT = {"scripted no-terminal", "scripted no-terminal resume", "scripted after-end",
                     "scripted after-end resume", "scripted interrupt-then-noise",
                     "scripted interrupt-then-noise resume", "scripted error-first", "scripted error-first resume",
                     "scripted wrong-run", "scripted wrong-run resume", "scripted malformed",
                     "scripted malformed resume",
                     # The client's schema wants at least one interrupt; the hub refuses the run (EMPTY_INTERRUPTS).
                     "scripted empty-interrupts", "scripted empty-interrupts resume",
                     # 1.0 rules the pre-1.0 client does not know (C3, C4, C11) or checks as the hub does (C37).
                     "scripted unknown-outcome", "scripted unknown-outcome resume",
                     "scripted success-with-interrupts", "scripted success-with-interrupts resume",
                     "scripted late-error", "scripted late-error resume"}
# The client discards a run its verification refuses at RUN_FINISHED (a message left open, C45), and the
# hub fails it (no terminal event): what the agent streamed stays in the thread's conversation, as
# fold keeps it, so these are compared up to the last event before the end.
OPEN_AT_END = {"scripted no-terminal", "scripted no-terminal resume"}
# The hub refuses the stream at the continuation naming another owner (C37): that event is never
# recorded, so fold never sees it, and the client discards the run.
OWNER_MISMATCH = {"scripted owner-mismatch", "scripted owner-mismatch resume"}
RECORDED = [(name, events) for name, events in RECORDED if name not in OPEN_AT_END | OWNER_MISMATCH]


@pytest.mark.parametrize(("name", "events"), RECORDED, ids=[name for name, _ in RECORDED])
def test_recorded_streams_fold_as_the_client_folds_them(client, name, events):
    if name in REFUSED_BY_CLIENT:
        # What follows the run's end never reaches fold: the hub's lifecycle refuses it first.
        end = next((i for i, e in enumerate(events) if e["type"] in ("RUN_FINISHED", "RUN_ERROR")), len(events))
        events = events[:end + 1]
    check(client, events, allow_error=name in REFUSED_BY_CLIENT)


@pytest.mark.parametrize(("name", "events", "messages", "state"), STREAMS, ids=[s[0] for s in STREAMS])
def test_conversation_streams_fold_as_the_client_folds_them(client, name, events, messages, state):
    check(client, events, messages, state)


def test_langgraph_capture_resumed_on_its_first_run(client):
    """Two runs in a row: the second folds onto what the first built."""
    runs = [events for name, events in RECORDED if name.startswith("README capture")][:2]
    first = check(client, runs[0])
    check(client, runs[1], first["messages"], first["state"])


# --------------------------------------------------------------------------- #
# Generated streams
# --------------------------------------------------------------------------- #

MESSAGE_IDS = [f"m{i}" for i in range(5)]
KEYS = ["a", "b", "c"]
values = st.one_of(st.integers(-5, 5), st.text("xyz", max_size=3), st.booleans(), st.none())
metadata = st.one_of(st.none(), st.dictionaries(st.sampled_from(KEYS), values, max_size=2))
json_values = st.recursive(values, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)),
                           max_leaves=6)


def _meta(event: dict, data) -> dict:
    drawn = data.draw(metadata)
    return event if drawn is None else {**event, "metadata": drawn}


def _patch(data) -> list[dict]:
    ops = []
    for _ in range(data.draw(st.integers(0, 3))):
        op = data.draw(st.sampled_from(["add", "replace", "remove", "test", "copy", "move"]))
        path = "/" + data.draw(st.sampled_from(KEYS))
        if op in ("add", "replace"):
            ops.append({"op": op, "path": path, "value": data.draw(json_values)})
        elif op == "test":
            # Strings only: JSON Patch's test compares JSON values, and Python's == says True == 1.
            ops.append({"op": op, "path": path, "value": data.draw(st.text("xyz", max_size=2))})
        elif op == "remove":
            ops.append({"op": op, "path": path})
        else:
            ops.append({"op": op, "from": "/" + data.draw(st.sampled_from(KEYS)), "path": path})
    return ops


def _snapshot_message(data, fresh_call) -> dict:
    kind = data.draw(st.sampled_from(["user", "assistant", "tool", "reasoning", "activity"]))
    message_id = data.draw(st.sampled_from(MESSAGE_IDS + ["s0", "s1"]))
    if kind == "user":
        return {"id": message_id, "role": "user", "content": data.draw(st.text("ab", max_size=3))}
    if kind == "assistant":
        message = {"id": message_id, "role": "assistant", "content": "said"}
        if data.draw(st.booleans()):
            message["toolCalls"] = [{"id": fresh_call(), "type": "function",
                                     "function": {"name": "f", "arguments": "{}"}}]
        return message
    if kind == "tool":
        return {"id": message_id, "role": "tool", "content": "done", "toolCallId": fresh_call()}
    if kind == "reasoning":
        return {"id": message_id, "role": "reasoning", "content": "hmm"}
    return {"id": message_id, "role": "activity", "activityType": "plan", "content": {"s": 1}}


@st.composite
def streams(draw):
    data = type("Draw", (), {"draw": staticmethod(draw)})()
    calls = iter(f"c{i}" for i in range(1000))
    used_messages: set[str] = set()
    events: list[dict] = []
    known_calls: list[str] = []

    def fresh_call():
        return next(calls)

    def fresh_message():
        """A message id no text or reasoning message of the stream has yet, or None when all are taken."""
        free = [m for m in MESSAGE_IDS if m not in used_messages]
        if not free:
            return None
        message_id = draw(st.sampled_from(free))
        used_messages.add(message_id)
        return message_id

    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["text", "text-chunk", "tool", "tool-chunk", "result", "reasoning",
                                     "reasoning-chunk", "encrypted", "activity", "activity-delta",
                                     "messages", "state", "delta"]))
        if kind in ("text", "reasoning"):
            if (message_id := fresh_message()) is None:
                continue
            prefix = "TEXT_MESSAGE" if kind == "text" else "REASONING_MESSAGE"
            start = {"type": f"{prefix}_START", "messageId": message_id}
            if kind == "text" and draw(st.booleans()):
                start["role"] = draw(st.sampled_from(["assistant", "user", "system", "developer"]))
            if kind == "reasoning":
                start["role"] = "reasoning"
            events.append(_meta(start, data))
            for delta in draw(st.lists(st.text("ab ", min_size=1, max_size=3), max_size=3)):
                events.append(_meta({"type": f"{prefix}_CONTENT", "messageId": message_id, "delta": delta}, data))
            events.append(_meta({"type": f"{prefix}_END", "messageId": message_id}, data))
        elif kind in ("text-chunk", "reasoning-chunk"):
            if (message_id := fresh_message()) is None:
                continue
            chunk = "TEXT_MESSAGE_CHUNK" if kind == "text-chunk" else "REASONING_MESSAGE_CHUNK"
            events.append(_meta({"type": chunk, "messageId": message_id, "delta": "x"}, data))
            for delta in draw(st.lists(st.text("ab", min_size=1, max_size=2), max_size=3)):
                events.append(_meta({"type": chunk, "delta": delta}, data))
        elif kind in ("tool", "tool-chunk"):
            call_id = fresh_call()
            known_calls.append(call_id)
            parent = draw(st.one_of(st.none(), st.sampled_from(MESSAGE_IDS)))
            pieces = draw(st.lists(st.sampled_from(['{"a"', ": 1", "}", ""]), max_size=3))
            if kind == "tool":
                start = {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": "f"}
                if parent is not None:
                    start["parentMessageId"] = parent
                events.append(_meta(start, data))
                events += [_meta({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": p}, data)
                           for p in pieces if p]
                events.append(_meta({"type": "TOOL_CALL_END", "toolCallId": call_id}, data))
            else:
                first = {"type": "TOOL_CALL_CHUNK", "toolCallId": call_id, "toolCallName": "f", "delta": "{"}
                if parent is not None:
                    first["parentMessageId"] = parent
                events.append(_meta(first, data))
                events += [{"type": "TOOL_CALL_CHUNK", "delta": p} for p in pieces if p]
        elif kind == "result":
            call_id = draw(st.sampled_from(known_calls)) if known_calls and draw(st.booleans()) else "c-unknown"
            events.append(_meta({"type": "TOOL_CALL_RESULT", "messageId": f"t{len(events)}", "toolCallId": call_id,
                                 "content": "ok"}, data))
        elif kind == "encrypted":
            tool = draw(st.booleans())
            entity = (draw(st.sampled_from(known_calls)) if tool and known_calls
                      else draw(st.sampled_from(MESSAGE_IDS)))
            events.append({"type": "REASONING_ENCRYPTED_VALUE", "subtype": "tool-call" if tool else "message",
                           "entityId": entity, "encryptedValue": "E"})
        elif kind == "activity":
            event = {"type": "ACTIVITY_SNAPSHOT", "messageId": draw(st.sampled_from(["a0", "a1", "u0"])),
                     "activityType": draw(st.sampled_from(["plan", "search"])),
                     "content": draw(st.dictionaries(st.sampled_from(KEYS), values, max_size=2))}
            replace = draw(st.sampled_from([None, True, False]))
            if replace is not None:
                event["replace"] = replace
            events.append(_meta(event, data))
        elif kind == "activity-delta":
            events.append(_meta({"type": "ACTIVITY_DELTA", "messageId": draw(st.sampled_from(["a0", "a1"])),
                                 "activityType": "plan", "patch": _patch(data)}, data))
        elif kind == "messages":
            snapshot = [_snapshot_message(data, fresh_call) for _ in range(draw(st.integers(0, 4)))]
            # Ids unique within one snapshot, as a producer's own messages are.
            unique = list({m["id"]: m for m in snapshot}.values())
            events.append({"type": "MESSAGES_SNAPSHOT", "messages": unique})
        elif kind == "state":
            events.append({"type": "STATE_SNAPSHOT",
                           "snapshot": draw(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=3))})
        else:
            events.append({"type": "STATE_DELTA", "delta": _patch(data)})
    messages = [{"id": "u0", "role": "user", "content": "hi"}]
    state = draw(st.one_of(st.none(), st.dictionaries(st.sampled_from(KEYS), json_values, max_size=3)))
    return events, messages, state


@settings(
    max_examples=int(os.environ.get("DIFFERENTIAL_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
@given(streams())
def test_generated_streams_fold_as_the_client_folds_them(client, stream):
    events, messages, state = stream
    reply = client(copy.deepcopy(events), copy.deepcopy(messages), copy.deepcopy(state))
    # A stream the client's verification refuses is the generator's mistake, not a finding.
    assume("error" not in reply)
    ours = fold(copy.deepcopy(events), copy.deepcopy(messages), copy.deepcopy(state))
    assert same(ours.messages, reply["messages"]), (events, ours.messages, reply["messages"])
    assert same(ours.state, reply["state"]), (events, ours.state, reply["state"])


# --------------------------------------------------------------------------- #
# Live captures: the TanStack AI and LangGraph agents of tests/external, a first run and its resume
# --------------------------------------------------------------------------- #

def _sse_events(response_text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in response_text.splitlines() if line.startswith("data: ")]


def _run_body(thread: str, run: str, messages: list, state, resume=None) -> dict:
    return {"threadId": thread, "runId": run, "messages": messages, "state": {} if state is None else state,
            "tools": [], "context": [], "forwardedProps": {}, **({"resume": resume} if resume else {})}


def _both_runs(client, url: str, path: str, entries) -> None:
    """A first run and its resume, each folded by both onto what the first built; ``entries`` makes the resume."""
    import httpx

    from interrupts.protocol.conversation import outgoing

    user = [{"id": "u-live", "role": "user", "content": "Refund order A-1001"}]
    with httpx.Client(timeout=60) as http:
        first = _sse_events(http.post(f"{url}/{path}/", json=_run_body("t-live", "r1", user, None)).text)
        assert first and first[-1]["type"] == "RUN_FINISHED", first
        reply = check(client, first, user, None)
        interrupts = first[-1]["outcome"]["interrupts"]
        body = _run_body("t-live", "r2", outgoing(reply["messages"]), reply["state"], entries(http, interrupts))
        second = _sse_events(http.post(f"{url}/{path}/", json=body).text)
        assert second and second[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), second
        check(client, second, reply["messages"], reply["state"])


def _peer_or_fail(ready: bool, why: str):
    if not ready:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def test_tanstack_agent_streams_fold_as_the_client_folds_them(client, tmp_path):
    from tests.e2e.conftest import external_agent
    from tests.servers import free_port

    peer = ROOT / "tests" / "external" / "tanstack"
    _peer_or_fail((peer / "node_modules" / "@tanstack" / "ai").is_dir(), "the TanStack peer is not installed")

    def entries(http, interrupts):
        continuations = http.post(f"{url}/_continuation/", json={"interrupts": interrupts}).json()["continuations"]
        return [
            {
                "interruptId": i["id"],
                "status": "resolved",
                "payload": {"approved": True},
                "metadata": {"tanstack:interruptContinuation": c},
            }
            for i, c in zip(interrupts, continuations, strict=False)
        ]

    with external_agent([shutil.which("node"), peer / "agent.mjs", free_port()], tmp_path, timeout=30) as log:
        url = log.read_text().split("ready on ", 1)[1].split()[0]
        _both_runs(client, url, "review", entries)


def test_langgraph_agent_streams_fold_as_the_client_folds_them(client, tmp_path):
    from tests.e2e.conftest import langgraph_agent

    _peer_or_fail((ROOT / ".venv-langgraph" / "bin" / "python").exists(), "the LangGraph peer venv is missing")

    def entries(http, interrupts):
        return [{"interruptId": i["id"], "status": "resolved", "payload": {"approved": True}} for i in interrupts]

    with langgraph_agent(tmp_path) as port:
        _both_runs(client, f"http://127.0.0.1:{port}", "approve", entries)
