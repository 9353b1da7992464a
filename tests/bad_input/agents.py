"""A real HTTP AG-UI agent that sends too much, one way per path.

Each path answers a POSTed RunAgentInput with a stream sized against the hub's
limits (the ``doors`` fixture sets them small), so a test sees where each
limit cuts, over real sockets.
"""

from __future__ import annotations

from ..loopback import LoopbackAgent, frame, send, stream

# The limits the `doors` hub runs with (bytes, events); tests/bad_input/conftest.py passes them on.
MAX_EVENT_BYTES = 64 * 1024
MAX_RUN_EVENTS = 200
MAX_RUN_BYTES = 1024 * 1024


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
    # A lone UTF-16 surrogate: valid JSON, but no character, and nothing can encode it again.
    "surrogate": lambda body: text_message(body, [])[:1] + [
        b'data: {"type": "STATE_SNAPSHOT", "snapshot": {"k\\ud800": "v"}}\n\n'],
    # Valid text everywhere, but tool args and a result that spell a lone surrogate once decoded.
    "surrogate-inside": lambda body: text_message(body, [])[:1] + [
        frame({"type": "TOOL_CALL_START", "toolCallId": "tc-s", "toolCallName": "probe"}),
        frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-s", "delta": '{"a": "\\ud800"}'}),
        frame({"type": "TOOL_CALL_END", "toolCallId": "tc-s"}),
        frame({"type": "TOOL_CALL_RESULT", "messageId": "m-r", "toolCallId": "tc-s", "content": '"\\udfff"'}),
        frame({"type": "RUN_FINISHED", "threadId": body["threadId"], "runId": body["runId"],
               "outcome": {"type": "interrupt", "interrupts": [
                   {"id": "i-s", "reason": "tool_call", "toolCallId": "tc-s", "message": "Probe?"}]}}),
    ],
    # Not JSON at all: a raw NUL byte inside a string. The refusal must still be recordable.
    "nul-byte": lambda body: text_message(body, [])[:1] + [
        b'data: {"type": "TEXT_MESSAGE_START", "messageId": "m\x00", "role": "assistant"}\n\n'],
}


class LimitsAgent(LoopbackAgent):
    def answer(self, handler, path, body):
        if path == "http-error-nul":
            # An error page with a NUL byte in it: the run's error message quotes the body.
            return send(handler, 500, "text/plain", b"boom\x00 broken")
        script = SCRIPTS.get(path)
        if script is None:
            return send(handler, 404, "text/plain", b"")
        stream(handler, script(body))  # the hub hangs up once a limit is passed, as it should
