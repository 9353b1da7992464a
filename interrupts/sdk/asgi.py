"""Serve an ``Agent`` from any ASGI server, without Django: POST RunAgentInput, answer text/event-stream.

It answers as the app's Django view does (both call ``driver.respond``);
this module adds only what ASGI asks of an app: reading the body within a
bound, the lifespan protocol, and stopping the agent when the client goes away.
Usage: docs/sdk.md.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from ..protocol import signing
from .agent import Agent
from .driver import BODY_READ_SECONDS, MAX_REQUEST_BYTES, STREAM_HEADERS, BodyTooLarge, BodyTooSlow, Refusal, respond

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


class ClientGone(Exception):
    """The client disconnected before its request's body arrived: nobody is left to answer."""


def agent_app(agent: Agent, auth: Callable[[Scope], bool | Awaitable[bool]] | None = None, *,
              signing_secret: Callable[[], str | None | Awaitable[str | None]] | None = None,
              require_signature: Callable[[], bool] | None = None,
              max_body_bytes: int = MAX_REQUEST_BYTES, body_timeout: float = BODY_READ_SECONDS):
    """An ASGI 3 application that runs ``agent`` once per POSTed RunAgentInput.

    ``auth`` is given the request's ASGI scope (its ``headers`` hold any
    credential); ``signing_secret`` and ``require_signature`` are asked on
    every request (``driver.respond``). A body over ``max_body_bytes``
    gets 413 ``TOO_LARGE`` without being read past the bound; one not whole
    within ``body_timeout`` seconds, 408 ``REQUEST_TIMEOUT``.
    """

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            # A WebSocket (or anything newer): this endpoint speaks HTTP only.
            if scope["type"] == "websocket":
                await receive()
                await send({"type": "websocket.close", "code": 1003})
            return
        headers = _headers(scope)
        try:
            answer = await respond(
                agent,
                method=scope["method"],
                content_type=headers.get("content-type"),
                signature=headers.get(signing.SIGNATURE_HEADER.lower()),
                read_body=lambda: _read_body(receive, headers, max_body_bytes, body_timeout),
                authorized=None if auth is None else (lambda: auth(scope)),
                signing_secret=signing_secret,
                require_signature=require_signature,
            )
        except ClientGone:
            return
        if isinstance(answer, Refusal):
            await _send_refusal(send, answer)
        else:
            await _stream(receive, send, answer)

    app.agent = agent
    return app


def _headers(scope: Scope) -> dict[str, str]:
    # Lower-case names; a header sent twice is joined by a comma, as Django's
    # ASGI handler joins it, so both servers see the same value.
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers") or ():
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    return headers


async def _read_body(receive: Receive, headers: Mapping[str, str], limit: int, timeout: float) -> bytes:
    try:
        async with asyncio.timeout(timeout):
            return await _body(receive, headers, limit)
    except TimeoutError:
        raise BodyTooSlow from None


async def _body(receive: Receive, headers: Mapping[str, str], limit: int) -> bytes:
    declared = headers.get("content-length", "")
    # ASCII digits only: "²".isdigit() is True, and int() refuses it.
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    # Counted as it arrives too: a chunked body declares no length.
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _encoded(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]


async def _send_refusal(send: Send, answer: Refusal) -> None:
    # json.dumps with its defaults: the bytes Django's JsonResponse sends for the same body.
    body = json.dumps(answer.body).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), **answer.headers}
    await send({"type": "http.response.start", "status": answer.status, "headers": _encoded(headers)})
    await send({"type": "http.response.body", "body": body})


async def _stream(receive: Receive, send: Send, frames: AsyncIterator[bytes]) -> None:
    """Send each frame as the agent emits it; if the client disconnects first, stop the agent."""

    async def pump() -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _encoded(STREAM_HEADERS)})
        async for frame in frames:
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def client_gone() -> None:
        # The body is read, so the next message is the disconnect (servers may
        # keep sending it after the response ends, as uvicorn does).
        while (await receive())["type"] != "http.disconnect":
            pass

    streaming, watching = asyncio.ensure_future(pump()), asyncio.ensure_future(client_gone())
    try:
        await asyncio.wait({streaming, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (streaming, watching):
            task.cancel()
        # A cancelled pump closes the driver's stream, which cancels the agent's task.
        await asyncio.wait({streaming, watching})
        await frames.aclose()
    if not streaming.cancelled():
        streaming.result()  # a failed send is the server's to report


async def _lifespan(receive: Receive, send: Send) -> None:
    # Nothing to start or stop: accept both, so servers that insist on lifespan run the app.
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


__all__ = ["agent_app"]
