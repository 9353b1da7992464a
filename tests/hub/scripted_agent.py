"""A real HTTP AG-UI agent that misbehaves on purpose, one way per path.

Runs a ThreadingHTTPServer on a free loopback port in the test process. Each
path answers a POSTed RunAgentInput with a scripted stream (or status); the
server counts the calls it gets per path and thread, so tests can prove the
hub called an agent exactly once.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def frame(event: dict) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


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
        call = {"id": "m-call", "role": "assistant", "toolCalls": [
            {"id": "tc-1", "type": "function", "function": {"name": "deleteRepo", "arguments": '{"repo": "acme/web"}'}}]}
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


SCRIPTS = {
    "evil": evil_interrupt,
    "approve": approve_interrupt,
    "legacy": lambda body: [frame(started(body)), frame(finished(body))],
    "malformed": lambda body: [frame(started(body)), b"data: {not json\n\n"],
    "unknown-type": lambda body: [frame(started(body)), frame({"type": "TELEPORT"})],
    "error-first": lambda body: [frame({"type": "RUN_ERROR", "code": "BOOM", "message": "exploded early"})],
    "no-terminal": lambda body: [frame(started(body)), frame({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"})],
    "after-end": lambda body: [frame(started(body)), frame(finished(body, {"type": "success"})),
                               frame({"type": "TEXT_MESSAGE_START", "messageId": "m9", "role": "assistant"})],
    "interrupt-then-noise": lambda body: approve_interrupt({k: v for k, v in body.items() if k != "resume"})
    + [frame({"type": "TEXT_MESSAGE_START", "messageId": "m9", "role": "assistant"})],
    "agent-error": lambda body: [frame(started(body)), frame({"type": "RUN_ERROR", "code": "QUOTA", "message": "out of credits"})],
    "wrong-run": lambda body: [frame({**started(body), "runId": "someone-elses-run"})],
    "duplicate-ids": lambda body: [frame(started(body)), frame(finished(body, {"type": "interrupt", "interrupts": [
        {"id": "same", "reason": "confirmation"}, {"id": "same", "reason": "confirmation"}]}))],
    "empty-interrupts": lambda body: [frame(started(body)), frame(finished(body, {"type": "interrupt", "interrupts": []}))],
}


class ScriptedAgent:
    def __init__(self) -> None:
        self.calls: Counter = Counter()
        self.bodies: list[tuple[str, dict]] = []
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                name = self.path.strip("/")
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                agent.calls[(name, body.get("threadId"))] += 1
                agent.bodies.append((name, body))
                if name == "http-422":
                    return self._send(422, "application/json",
                                      json.dumps({"detail": [{"loc": ["body", "messages"], "msg": "Field required"}]}).encode())
                if name == "html":
                    return self._send(200, "text/html", b"<html>not an agent</html>")
                if name == "slow-finish":
                    # Finishes after a while: the run stays in progress meanwhile.
                    self._start_stream()
                    self._write(frame(started(body)))
                    time.sleep(1)
                    self._write(frame(finished(body, {"type": "success"})))
                    return
                if name == "silent":
                    self._start_stream()
                    self._write(frame(started(body)))
                    time.sleep(3)  # longer than the hub's idle timeout in these tests
                    return
                if name == "linger":
                    # Finishes, then keeps the connection open without a word.
                    self._start_stream()
                    self._write(frame(started(body)) + frame(finished(body, {"type": "success"})))
                    time.sleep(3)
                    return
                script = SCRIPTS.get(name)
                if script is None:
                    return self._send(404, "application/json", b'{"detail": "no such script"}')
                self._start_stream()
                for chunk in script(body):
                    self._write(chunk)

            def _send(self, status, content_type, data):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _start_stream(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()

            def _write(self, data: bytes):
                try:
                    self.wfile.write(data)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the hub hung up, as it should after a fault

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> ScriptedAgent:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
