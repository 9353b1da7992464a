"""Real HTTP AG-UI agents for tests: a threaded HTTP server on a free loopback port, in the test process.

Each agent subclasses ``LoopbackAgent`` and answers every POSTed RunAgentInput
in ``answer(handler, path, body)``, with ``send`` (a plain response) or
``start_stream`` and ``write`` (an event stream). Countersign hanging up
mid-stream is what several tests want, so ``write`` reports it rather than
raising.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def frame(event: dict) -> bytes:
    """One SSE frame holding ``event`` as JSON."""
    return f"data: {json.dumps(event)}\n\n".encode()


def send(handler: BaseHTTPRequestHandler, status: int, content_type: str, data: bytes) -> None:
    """A whole response that is not a stream."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def start_stream(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()


def write(handler: BaseHTTPRequestHandler, data: bytes) -> bool:
    """Send ``data`` now; False once Countersign has closed the connection."""
    try:
        handler.wfile.write(data)
        handler.wfile.flush()
        return True
    except ConnectionError:  # broken pipe, reset, aborted
        return False


def stream(handler: BaseHTTPRequestHandler, chunks) -> None:
    """An event stream of ``chunks`` (bytes), stopping quietly if Countersign hangs up."""
    start_stream(handler)
    for chunk in chunks:
        if not write(handler, chunk):
            return


class LoopbackAgent:
    """An AG-UI agent on ``port`` (0: a free one) of 127.0.0.1, serving from a daemon thread."""

    def __init__(self, port: int = 0) -> None:
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                # Kept as received: a test checks the signature over these exact bytes.
                self.raw_body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(self.raw_body)
                agent.answer(self, self.path.strip("/"), body)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, handler: BaseHTTPRequestHandler, path: str, body: dict) -> None:
        """Answer one POSTed RunAgentInput (``body``) sent to ``path`` (without slashes)."""
        raise NotImplementedError

    def start(self):
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ShipRecorder(LoopbackAgent):
    """Asks for one tool-bound approval (``approve-ship`` of ``ship`` ``tc-ship``), succeeds on resume.

    Keeps every POST as (raw body, headers, parsed body), so a test can
    check Countersign's signature over the exact bytes it sent.
    """

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[bytes, dict, dict]] = []
        self.lock = threading.Lock()

    def answer(self, handler, path, body) -> None:
        with self.lock:
            self.requests.append((handler.raw_body, dict(handler.headers), body))
        ids = {"threadId": body["threadId"], "runId": body["runId"]}
        if body.get("resume"):
            frames = [frame({"type": "RUN_STARTED", **ids}),
                      frame({"type": "RUN_FINISHED", **ids, "outcome": {"type": "success"}})]
        else:
            frames = [
                frame({"type": "RUN_STARTED", **ids}),
                frame({"type": "TOOL_CALL_START", "toolCallId": "tc-ship", "toolCallName": "ship"}),
                frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-ship", "delta": '{"to": "prod"}'}),
                frame({"type": "TOOL_CALL_END", "toolCallId": "tc-ship"}),
                frame({"type": "RUN_FINISHED", **ids, "outcome": {"type": "interrupt", "interrupts": [
                    {"id": "approve-ship", "reason": "tool_call", "toolCallId": "tc-ship", "message": "Ship?"}]}}),
            ]
        stream(handler, frames)

    def resumes(self, thread: str) -> list[tuple[bytes, dict, dict]]:
        with self.lock:
            return [r for r in self.requests if r[2]["threadId"] == thread and r[2].get("resume")]

    def calls(self, thread: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r[2]["threadId"] == thread)
