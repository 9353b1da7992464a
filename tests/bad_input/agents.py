"""A real HTTP AG-UI agent that sends too much, one way per path.

Each path answers a POSTed RunAgentInput with a stream sized against the hub's
limits (the ``doors`` fixture sets them small), so a test sees where each
limit cuts, over real sockets.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The limits the `doors` hub runs with (bytes, events); tests/bad_input/conftest.py passes them on.
MAX_EVENT_BYTES = 64 * 1024
MAX_RUN_EVENTS = 200
MAX_RUN_BYTES = 1024 * 1024


def frame(event: dict) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


def text_message(body: dict, deltas: list[str]) -> list[bytes]:
    """A whole run that says ``deltas`` as one assistant message."""
    ids = {"threadId": body["threadId"], "runId": body["runId"]}
    return [
        frame({"type": "RUN_STARTED", **ids}),
        frame({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
        *(frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": delta}) for delta in deltas),
        frame({"type": "TEXT_MESSAGE_END", "messageId": "m1"}),
        frame({"type": "RUN_FINISHED", **ids, "outcome": {"type": "success"}}),
    ]


# The JSON around a TEXT_MESSAGE_CONTENT delta, and its "data: " line, take under 200 bytes.
SCRIPTS = {
    # One event a kilobyte under the limit: recorded whole.
    "near-limit": lambda body: text_message(body, ["x" * (MAX_EVENT_BYTES - 1024)]),
    # One event a byte over the limit, between events that fit.
    "big-event": lambda body: text_message(body, ["small", "x" * (MAX_EVENT_BYTES + 1), "never read"]),
    # Many small events: more than a run may have.
    "many-events": lambda body: text_message(body, ["x"] * (MAX_RUN_EVENTS + 50)),
    # Few events, each under the event limit, together over the run's byte limit.
    "big-stream": lambda body: text_message(
        body, ["x" * (MAX_EVENT_BYTES // 2)] * (2 * MAX_RUN_BYTES // MAX_EVENT_BYTES + 2)),
    # Valid JSON and valid AG-UI, but text no PostgreSQL column can hold.
    "nul": lambda body: text_message(body, ["before\u0000after"]),
    # Not JSON at all: a raw NUL byte inside a string. The refusal must still be recordable.
    "nul-byte": lambda body: text_message(body, [])[:1] + [
        b'data: {"type": "TEXT_MESSAGE_START", "messageId": "m\x00", "role": "assistant"}\n\n'],
}


class LimitsAgent:
    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path.strip("/") == "http-error-nul":
                    # An error page with a NUL byte in it: the run's error message quotes the body.
                    self.send_response(500)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", "12")
                    self.end_headers()
                    self.wfile.write(b"boom\x00 broken")
                    return
                script = SCRIPTS.get(self.path.strip("/"))
                if script is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                try:
                    for chunk in script(body):
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the hub hung up, as it should once a limit is passed

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> LimitsAgent:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
