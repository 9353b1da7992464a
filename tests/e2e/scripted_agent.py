"""A real HTTP AG-UI agent that misbehaves on purpose, one way per path.

Runs a ThreadingHTTPServer on a free loopback port in the test process. Each
path answers a POSTed RunAgentInput with a scripted stream (or status); the
server counts the calls it gets per path and thread, so tests can prove the
hub called an agent exactly once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from ..loopback import LoopbackAgent, frame, send, start_stream, stream, write


def started(body: dict) -> dict:
    return {"type": "RUN_STARTED", "threadId": body["threadId"], "runId": body["runId"]}


def finished(body: dict, outcome: dict | None = None) -> dict:
    event = {"type": "RUN_FINISHED", "threadId": body["threadId"], "runId": body["runId"]}
    if outcome is not None:
        event["outcome"] = outcome
    return event


def approve_interrupt(body: dict) -> list[bytes]:
    """Interrupt for approval; on resume, report what was answered and succeed."""
    if body.get("resume"):
        answers = {e["interruptId"]: e for e in body["resume"]}
        call = {
            "id": "m-call",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "tc-1",
                    "type": "function",
                    "function": {"name": "deleteRepo", "arguments": '{"repo": "acme/web"}'},
                }
            ],
        }
        return [
            frame(started(body)),
            frame({"type": "MESSAGES_SNAPSHOT", "messages": [call]}),
            frame({"type": "TOOL_CALL_RESULT", "messageId": "m-result", "toolCallId": "tc-1",
                   "content": json.dumps(answers)}),
            frame(finished(body, {"type": "success"})),
        ]
    return [
        frame(started(body)),
        frame({"type": "TOOL_CALL_START", "toolCallId": "tc-1", "toolCallName": "deleteRepo"}),
        frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-1", "delta": '{"repo": '}),
        frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-1", "delta": '"acme/web"}'}),
        frame({"type": "TOOL_CALL_END", "toolCallId": "tc-1"}),
        frame(finished(body, {"type": "interrupt", "interrupts": [{
            "id": "int-1", "reason": "tool_call", "toolCallId": "tc-1", "message": "Delete acme/web?",
            "responseSchema": {"type": "object", "properties": {"approved": {"type": "boolean"}},
                               "required": ["approved"]},
        }]})),
    ]


def no_snapshot_interrupt(body: dict) -> list[bytes]:
    """As Pydantic AI: the tool call only streamed (no MESSAGES_SNAPSHOT), and a resume checked against history.

    The resume must carry the assistant turn with the call, built from the
    events; without it the agent answers RUN_ERROR as Pydantic AI does.
    """
    if body.get("resume"):
        turn = next((m for m in body.get("messages") or [] if m.get("role") == "assistant"
                     and any(c.get("id") == "tc-ns" for c in m.get("toolCalls") or [])), None)
        if turn is None or turn.get("content") != "I will delete acme/web." or json.loads(
                turn["toolCalls"][0]["function"]["arguments"]) != {"repo": "acme/web"}:
            return [frame(started(body)), frame({"type": "RUN_ERROR", "code": "NO_MODEL_RESPONSE",
                                                 "message": "the message history does not contain a ModelResponse"})]
        [entry] = body["resume"]
        done = "deleted" if entry.get("status") == "resolved" and entry["payload"].get("approved") else "not deleted"
        return [
            frame(started(body)),
            frame({"type": "TOOL_CALL_RESULT", "messageId": "r-ns", "toolCallId": "tc-ns", "content": done}),
            frame({"type": "TEXT_MESSAGE_CHUNK", "messageId": "a-ns-2", "delta": "acme/web "}),
            frame({"type": "TEXT_MESSAGE_CHUNK", "delta": done}),
            frame(finished(body, {"type": "success"})),
        ]
    return [
        frame(started(body)),
        frame({"type": "TEXT_MESSAGE_START", "messageId": "a-ns", "role": "assistant"}),
        frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a-ns", "delta": "I will delete "}),
        frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a-ns", "delta": "acme/web."}),
        frame({"type": "TEXT_MESSAGE_END", "messageId": "a-ns"}),
        frame({"type": "TOOL_CALL_START", "toolCallId": "tc-ns", "toolCallName": "deleteRepo",
               "parentMessageId": "a-ns"}),
        frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-ns", "delta": '{"repo": '}),
        frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-ns", "delta": '"acme/web"}'}),
        frame({"type": "TOOL_CALL_END", "toolCallId": "tc-ns"}),
        frame({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/asked", "value": True}]}),
        frame(finished(body, {"type": "interrupt", "interrupts": [{
            "id": "int-ns", "reason": "tool_call", "toolCallId": "tc-ns", "message": "Delete acme/web?",
            "responseSchema": {"type": "object", "properties": {"approved": {"type": "boolean"}},
                               "required": ["approved"]},
        }]})),
    ]


EVIL = "<img src=x onerror=alert(1)><script>alert(2)</script>"


def evil_interrupt(body: dict) -> list[bytes]:
    """Markup everywhere an agent can put text: every page must show it as text."""
    return [
        frame(started(body)),
        frame({"type": "TEXT_MESSAGE_START", "messageId": "m-evil", "role": "assistant"}),
        frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-evil", "delta": EVIL}),
        frame({"type": "TEXT_MESSAGE_END", "messageId": "m-evil"}),
        frame({"type": "TOOL_CALL_START", "toolCallId": "tc-evil", "toolCallName": EVIL}),
        frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-evil", "delta": json.dumps({"html": EVIL})}),
        frame({"type": "TOOL_CALL_END", "toolCallId": "tc-evil"}),
        frame(finished(body, {"type": "interrupt", "interrupts": [
            {"id": "int-evil", "reason": EVIL, "message": EVIL, "toolCallId": "tc-evil",
             "metadata": {EVIL: EVIL},
             "responseSchema": {"type": "object", "title": EVIL, "description": EVIL,
                                "properties": {"note": {"type": "string", "title": EVIL, "description": EVIL}},
                                "required": ["note"]}},
        ]})),
    ]


APPROVAL_SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


def batch_interrupts(count: int):
    """One run raising ``count`` confirmations at once; the resume (all answers) succeeds."""

    def script(body: dict) -> list[bytes]:
        if body.get("resume"):
            return [frame(started(body)), frame(finished(body, {"type": "success"}))]
        return [frame(started(body)), frame(finished(body, {"type": "interrupt", "interrupts": [
            {"id": f"int-{n}", "reason": "confirmation", "message": f"Step {n}?", "responseSchema": APPROVAL_SCHEMA}
            for n in range(count)]}))]

    return script


def frontend_tool(declare: bool):
    """A run that asks its client to run ``pick_date`` (a frontend tool) and finishes (AG-UI 1.0 P25-P28).

    ``declare``: with ``pendingToolCallIds``; without it the call is only left
    unanswered, as LlamaIndex's AG-UI router does. Its next run (the client's
    answer among the messages, keyed by toolCallId) says what it was told.
    """

    def script(body: dict) -> list[bytes]:
        answers = {m.get("toolCallId"): m.get("content") for m in body.get("messages") or [] if m.get("role") == "tool"}
        if "tc-front" in answers:
            return [
                frame(started(body)),
                frame({"type": "TEXT_MESSAGE_START", "messageId": "m-told", "role": "assistant"}),
                frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-told", "delta": f"told {answers['tc-front']}"}),
                frame({"type": "TEXT_MESSAGE_END", "messageId": "m-told"}),
                frame(finished(body, {"type": "success"})),
            ]
        call = {"id": "m-ask", "role": "assistant", "toolCalls": [
            {"id": "tc-front", "type": "function", "function": {"name": "pick_date", "arguments": "{}"}}]}
        return [
            frame({**started(body), "protocolVersion": "1.0"}),
            frame({"type": "TOOL_CALL_START", "toolCallId": "tc-front", "toolCallName": "pick_date",
                   "parentMessageId": "m-ask"}),
            frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-front", "delta": "{}"}),
            frame({"type": "TOOL_CALL_END", "toolCallId": "tc-front"}),
            frame({"type": "MESSAGES_SNAPSHOT", "messages": [*(body.get("messages") or []), call]}),
            frame(finished(body, {"type": "success", "pendingToolCallIds": ["tc-front"]} if declare else None)),
        ]

    return script


SCRIPTS = {
    "frontend-tool": frontend_tool(declare=True),
    "frontend-tool-silent": frontend_tool(declare=False),
    "newer-version": lambda body: [
        frame({**started(body), "protocolVersion": "1.10"}),
        frame(finished(body, {"type": "success"})),
    ],
    "batch-50": batch_interrupts(50),
    "evil": evil_interrupt,
    "approve": approve_interrupt,
    "no-snapshot": no_snapshot_interrupt,
    "legacy": lambda body: [frame(started(body)), frame(finished(body))],
    "malformed": lambda body: [frame(started(body)), b"data: {not json\n\n"],
    "unknown-type": lambda body: [frame(started(body)), frame({"type": "TELEPORT"})],
    "error-first": lambda body: [frame({"type": "RUN_ERROR", "code": "BOOM", "message": "exploded early"})],
    "no-terminal": lambda body: [
        frame(started(body)),
        frame({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
    ],
    "after-end": lambda body: [
        frame(started(body)),
        frame(finished(body, {"type": "success"})),
        frame({"type": "TEXT_MESSAGE_START", "messageId": "m9", "role": "assistant"}),
    ],
    "interrupt-then-noise": lambda body: (
        approve_interrupt({k: v for k, v in body.items() if k != "resume"})
        + [frame({"type": "TEXT_MESSAGE_START", "messageId": "m9", "role": "assistant"})]
    ),
    "agent-error": lambda body: [
        frame(started(body)),
        frame({"type": "RUN_ERROR", "code": "QUOTA", "message": "out of credits"}),
    ],
    "wrong-run": lambda body: [frame({**started(body), "runId": "someone-elses-run"})],
    "duplicate-ids": lambda body: [
        frame(started(body)),
        frame(
            finished(
                body,
                {
                    "type": "interrupt",
                    "interrupts": [{"id": "same", "reason": "confirmation"}, {"id": "same", "reason": "confirmation"}],
                },
            )
        ),
    ],
    "late-error": lambda body: (
        approve_interrupt({k: v for k, v in body.items() if k != "resume"})
        + [frame({"type": "RUN_ERROR", "code": "COMMIT_FAILED", "message": "the checkpoint write failed"})]
    ),
    "unknown-outcome": lambda body: [frame(started(body)), frame(finished(body, {"type": "handoff", "to": "x"}))],
    "success-with-interrupts": lambda body: [
        frame(started(body)),
        frame(finished(body, {"type": "success", "interrupts": [{"id": "int-1", "reason": "confirmation"}]})),
    ],
    "owner-mismatch": lambda body: [
        frame(started(body)),
        frame({"type": "TEXT_MESSAGE_START", "messageId": "m-9", "role": "assistant", "subagentRunId": "sub-1"}),
        frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-9", "delta": "hi", "subagentRunId": "sub-2"}),
        frame({"type": "TEXT_MESSAGE_END", "messageId": "m-9"}),
        frame(finished(body, {"type": "success"})),
    ],
    "empty-interrupts": lambda body: [
        frame(started(body)),
        frame(finished(body, {"type": "interrupt", "interrupts": []})),
    ],
}


class Gate:
    """Holds the "gated" script's streams open after RUN_STARTED.

    It opens when ``size`` streams wait at once (proof that that many ran
    concurrently), or when ``open()`` is called; a stream never waits longer
    than ``timeout`` seconds, so a failing test cannot hang the agent.
    """

    def __init__(self, size: int | None = None, timeout: float = 30.0) -> None:
        self.size, self.timeout = size, timeout
        self.arrived = 0  # streams that reached the gate
        self.waiting = 0
        self.filled = False  # opened because ``size`` streams waited at once
        self._opened = threading.Event()
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            self.arrived += 1
            self.waiting += 1
            if self.size is not None and self.waiting >= self.size:
                self.filled = True
                self._opened.set()
        try:
            self._opened.wait(self.timeout)
        finally:
            with self._lock:
                self.waiting -= 1

    def open(self) -> None:
        self._opened.set()


class ScriptedAgent(LoopbackAgent):
    # How long the slow scripts keep the peer busy: part of each scenario, not a wait of the test's.
    SLOW_FINISH = 1.0  # "slow-finish": the run stays in progress this long
    SILENCE = 3.0  # "silent" and "linger": longer than the hub's idle timeout in these tests

    def __init__(self, port: int = 0, record: str | None = None) -> None:
        super().__init__(port)
        self.record = record
        self.calls: Counter = Counter()
        self.bodies: list[tuple[str, dict]] = []
        # The "gated" script waits here when a test sets one.
        self.gate: Gate | None = None

    def answer(self, handler, name, body) -> None:
        self.calls[(name, body.get("threadId"))] += 1
        self.bodies.append((name, body))
        if self.record:
            # Run as its own process, the agent reports every call in a file
            # that outlives it (tests kill it and start it again).
            with open(self.record, "a") as out:
                out.write(json.dumps({"path": name, "body": body}) + "\n")
        if name == "http-422":
            return send(handler, 422, "application/json",
                        json.dumps({"detail": [{"loc": ["body", "messages"], "msg": "Field required"}]}).encode())
        if name == "html":
            return send(handler, 200, "text/html", b"<html>not an agent</html>")
        if name == "slow-finish":
            # Finishes after a while: the run stays in progress meanwhile.
            start_stream(handler)
            write(handler, frame(started(body)))
            time.sleep(self.SLOW_FINISH)
            write(handler, frame(finished(body, {"type": "success"})))
            return
        if name == "silent":
            start_stream(handler)
            write(handler, frame(started(body)))
            time.sleep(self.SILENCE)
            return
        if name == "gated":
            # The "approve" script, held open after RUN_STARTED while a gate is set.
            start_stream(handler)
            write(handler, frame(started(body)))
            if (gate := self.gate) is not None:
                gate.wait()
            for chunk in approve_interrupt(body)[1:]:
                write(handler, chunk)
            return
        if name == "linger":
            # Finishes, then keeps the connection open without a word.
            start_stream(handler)
            write(handler, frame(started(body)) + frame(finished(body, {"type": "success"})))
            time.sleep(self.SILENCE)
            return
        if name.startswith("refuse-") and body.get("resume") and self.calls[(name, body.get("threadId"))] == 2:
            # The first resume of each thread is refused, each path its own way;
            # any later one (sent again, or new answers) goes through.
            return self.refuse(handler, name, body)
        if name.startswith("refuse-"):
            return stream(handler, approve_interrupt(body))
        script = SCRIPTS.get(name)
        if script is None:
            return send(handler, 404, "application/json", b'{"detail": "no such script"}')
        stream(handler, script(body))  # the hub hangs up after a fault, as it should

    def refuse(self, handler, name, body) -> None:
        if name == "refuse-http":
            return send(handler, 500, "application/json", b'{"detail": "approval store unavailable"}')
        if name == "refuse-early":  # a RUN_ERROR before RUN_STARTED, as TanStack AI answers an unknown interrupt
            return stream(handler, [frame({"type": "RUN_ERROR", "code": "unknown-interrupt",
                                           "message": "No pending interrupt int-1"})])
        if name == "refuse-fault":
            return stream(handler, [frame(started(body)), b"data: {not json\n\n"])
        return stream(handler, [frame(started(body)), frame({"type": "RUN_ERROR", "code": "STALE_APPROVAL",
                                                              "message": "The approval came too late"})])

    def calls_per_run(self, threads, resumes: bool | None = None) -> Counter:
        """How many POSTs each runId of ``threads`` got (only resumes, or only new runs, if asked)."""
        threads = set(threads)
        return Counter(body.get("runId") for _, body in list(self.bodies)
                       if body.get("threadId") in threads and (resumes is None or bool(body.get("resume")) == resumes))

class AgentProcess:
    """The scripted agent as a process of its own on ``port``, to kill with SIGKILL and start again.

    It appends every call it gets to ``record`` (JSON lines), so the count survives its death.
    """

    def __init__(self, port: int, record) -> None:
        self.port, self.record, self.process = port, record, None

    def start(self) -> AgentProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.scripted_agent", "--port", str(self.port), "--record", str(self.record)],
            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True,
        )
        assert "ready on" in self.process.stdout.readline()
        return self

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def calls(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


if __name__ == "__main__":
    # A process of its own: `python -m tests.e2e.scripted_agent --port P --record calls.jsonl`.
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    options = parser.parse_args()
    served = ScriptedAgent(options.port, options.record)
    print(f"ready on {served.url}", flush=True)
    served.server.serve_forever()
