"""A fast standalone AG-UI agent for the benchmarks: plain asyncio HTTP, no framework.

    .venv/bin/python bench/agent.py --port 8765

Events are the official ``ag_ui.core`` models written by ``ag_ui.encoder``'s
EventEncoder; the text frames of a long stream are encoded once and reused, so
the agent costs next to nothing per event and the benchmarks measure the
reader, not the writer. Every response closes its connection after the last
frame, as an agent should after its terminal event.

POST /stream/     RUN_STARTED, TEXT_MESSAGE_START, TEXT_MESSAGE_CONTENT…,
                  TEXT_MESSAGE_END, RUN_FINISHED: ``forwardedProps.events``
                  events in all (default 20,000), as fast as the reader takes them;
                  with ``forwardedProps.pace``, one token every ``pace`` seconds
                  instead (a model writing as it thinks), in a message of its own.
                  With ``forwardedProps.varied``, the tokens are words of random
                  letters rather than one word again (text no store compresses away).
                  With ``forwardedProps.gate``, nothing is written (not even
                  RUN_STARTED) until that gate is released (below).
POST /interrupt/  RUN_STARTED, then RUN_FINISHED with one ``confirmation``
                  interrupt. ``forwardedProps``: ``group``/``size`` hold the
                  terminal frame until ``size`` runs of the group are open,
                  then ``hold`` seconds plus a random ``spread``; ``schema``
                  replaces the interrupt's responseSchema. A resume
                  (``resume`` in the input) gets RUN_STARTED, RUN_FINISHED success.
GET  /log/        when things happened (``time.time()``): ``requests`` by runId
                  (request read), ``terminal`` by threadId (just before the
                  interrupt's RUN_FINISHED was written), ``resumes`` by threadId.
GET  /wait/resume/<threadId>/  answers once that thread's resume has arrived.
GET  /release/<gate>/<size>/   once ``size`` streams of that gate have arrived
                  (or after GATE_TIMEOUT), lets them all write at once;
                  answers ``{"at": time.time() of the release, "arrived": n}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import defaultdict

from ag_ui.core import (
    Interrupt,
    RunAgentInput,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from ag_ui.encoder import EventEncoder

ENCODER = EventEncoder()
MESSAGE_ID = "msg-bench"
WRITE_BATCH = 256  # frames per write: about 16 KiB
GROUP_TIMEOUT = 20  # seconds a run waits for the rest of its group before ending anyway
GATE_TIMEOUT = 60  # seconds a release waits for the gate's streams to arrive
CONFIRM_SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}

log: dict[str, dict[str, float]] = {"requests": {}, "terminal": {}, "resumes": {}}
resume_arrived: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
groups: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
group_sizes: dict[str, int] = defaultdict(int)
gates: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
gate_arrivals: dict[str, int] = defaultdict(int)
gate_changed: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
_content: bytes | None = None


def encode(event) -> bytes:
    return ENCODER.encode(event).encode()


def varied_frames(message_id: str, count: int = 4096) -> list[bytes]:
    """Token frames of words of random letters (the same words for a given message id)."""
    rng = random.Random(message_id)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [encode(TextMessageContentEvent(message_id=message_id, delta="".join(
        rng.choice(letters) for _ in range(rng.randint(2, 9))) + " ")) for _ in range(count)]


def content_frame() -> bytes:
    global _content
    if _content is None:
        _content = encode(TextMessageContentEvent(message_id=MESSAGE_ID, delta="token "))
    return _content


class Request:
    def __init__(self, method: str, path: str, body: bytes) -> None:
        self.method, self.path, self.body = method, path, body


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return Request(method, path, body)


def respond_head(writer: asyncio.StreamWriter, status: str, content_type: str) -> None:
    writer.write(
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\n"
        "connection: close\r\n\r\n".encode()
    )


async def respond_json(writer: asyncio.StreamWriter, status: str, data) -> None:
    respond_head(writer, status, "application/json")
    writer.write(json.dumps(data).encode())
    await writer.drain()


async def stream(writer: asyncio.StreamWriter, run: RunAgentInput) -> None:
    props = run.forwarded_props or {}
    total = max(int(props.get("events", 20_000)), 4)
    respond_head(writer, "200 OK", ENCODER.get_content_type())
    if gate := props.get("gate"):
        await writer.drain()
        gate_arrivals[gate] += 1
        gate_changed[gate].set()
        await gates[gate].wait()
    writer.write(encode(RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id)))
    pace = float(props.get("pace", 0))
    message_id = f"msg-{run.run_id}" if pace else MESSAGE_ID
    writer.write(encode(TextMessageStartEvent(message_id=message_id, role="assistant")))
    remaining = total - 4
    varied = bool(props.get("varied"))
    frames = varied_frames(message_id) if varied else [
        encode(TextMessageContentEvent(message_id=message_id, delta="token "))]
    if pace:
        for n in range(remaining):
            writer.write(frames[n % len(frames)])
            await writer.drain()
            await asyncio.sleep(pace)
        remaining = 0
    written = 0
    while remaining > 0:
        batch = min(remaining, WRITE_BATCH)
        writer.write(b"".join(frames[(written + n) % len(frames)] for n in range(batch)) if varied
                     else content_frame() * batch)
        remaining -= batch
        written += batch
        await writer.drain()
    writer.write(encode(TextMessageEndEvent(message_id=message_id)))
    writer.write(encode(RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id,
                                         outcome=RunFinishedSuccessOutcome())))
    await writer.drain()


async def interrupt(writer: asyncio.StreamWriter, run: RunAgentInput) -> None:
    respond_head(writer, "200 OK", ENCODER.get_content_type())
    writer.write(encode(RunStartedEvent(thread_id=run.thread_id, run_id=run.run_id)))
    await writer.drain()
    if run.resume:
        log["resumes"][run.thread_id] = log["requests"][run.run_id]
        resume_arrived[run.thread_id].set()
        writer.write(encode(RunFinishedEvent(thread_id=run.thread_id, run_id=run.run_id,
                                             outcome=RunFinishedSuccessOutcome())))
        await writer.drain()
        return
    props = run.forwarded_props or {}
    if group := props.get("group"):
        group_sizes[group] += 1
        if group_sizes[group] >= int(props.get("size", 1)):
            groups[group].set()
        try:
            await asyncio.wait_for(groups[group].wait(), GROUP_TIMEOUT)
        except TimeoutError:
            print(f"group {group}: only {group_sizes[group]} of {props.get('size')} runs arrived", flush=True)
    await asyncio.sleep(float(props.get("hold", 0)) + random.uniform(0, float(props.get("spread", 0))))
    terminal = encode(RunFinishedEvent(
        thread_id=run.thread_id, run_id=run.run_id,
        outcome=RunFinishedInterruptOutcome(interrupts=[Interrupt(
            id=f"confirm-{run.run_id}", reason="confirmation", message="Go ahead?",
            response_schema=props.get("schema") or CONFIRM_SCHEMA,
        )]),
    ))
    log["terminal"][run.thread_id] = time.time()
    writer.write(terminal)
    await writer.drain()


async def release(gate: str, size: int) -> dict:
    deadline = time.monotonic() + GATE_TIMEOUT
    while gate_arrivals[gate] < size and time.monotonic() < deadline:
        gate_changed[gate].clear()
        try:
            await asyncio.wait_for(gate_changed[gate].wait(), max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            break
    at = time.time()
    gates[gate].set()
    return {"at": at, "arrived": gate_arrivals[gate]}


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        request = await read_request(reader)
        received = time.time()
        if request.method == "GET" and request.path == "/log/":
            await respond_json(writer, "200 OK", log)
        elif request.method == "GET" and request.path.startswith("/wait/resume/"):
            thread_id = request.path.removeprefix("/wait/resume/").strip("/")
            await asyncio.wait_for(resume_arrived[thread_id].wait(), 60)
            await respond_json(writer, "200 OK", {"at": log["resumes"][thread_id]})
        elif request.method == "GET" and request.path.startswith("/release/"):
            gate, size = request.path.removeprefix("/release/").strip("/").split("/")
            await respond_json(writer, "200 OK", await release(gate, int(size)))
        elif request.method == "POST" and request.path in ("/stream/", "/interrupt/"):
            run = RunAgentInput.model_validate_json(request.body)
            log["requests"][run.run_id] = received
            await (stream if request.path == "/stream/" else interrupt)(writer, run)
        else:
            await respond_json(writer, "404 Not Found", {"message": f"No {request.method} {request.path} here."})
    except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
        pass  # the reader went away (or never came back): nothing to tell it
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = await asyncio.start_server(handle, "127.0.0.1", args.port, backlog=1024, limit=1 << 20)
    print(f"agent listening on http://127.0.0.1:{args.port}/", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
