"""A small WebSocket client (RFC 6455) on asyncio streams, for the benchmarks.

The app's requirements carry no WebSocket client, and a benchmark that holds
a thousand sockets wants one that costs little: this one speaks just what
Countersign's consumers need (text frames in, ping answered, close).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import struct
from urllib.parse import urlsplit

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


class HandshakeRefused(Exception):
    pass


class WebSocket:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.closed = False

    @classmethod
    async def connect(cls, url: str, *, cookie: str = "", origin: str = "", timeout: float = 30) -> WebSocket:
        """Open ``url`` (ws://host:port/path) with the session ``cookie`` and ``origin`` a browser would send."""
        parts = urlsplit(url)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, parts.port), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        headers = [
            f"GET {parts.path or '/'} HTTP/1.1",
            f"Host: {parts.hostname}:{parts.port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ]
        if origin:
            headers.append(f"Origin: {origin}")
        if cookie:
            headers.append(f"Cookie: {cookie}")
        writer.write(("\r\n".join(headers) + "\r\n\r\n").encode())
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        except BaseException:
            writer.close()
            raise
        status, *lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in status:
            writer.close()
            raise HandshakeRefused(f"{url}: {status}")
        expected = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        headers = {name.strip().lower(): value.strip() for name, _, value in (x.partition(":") for x in lines)}
        accept = headers.get("sec-websocket-accept", "")
        if accept != expected:
            writer.close()
            raise HandshakeRefused(f"{url}: bad Sec-WebSocket-Accept")
        return cls(reader, writer)

    async def _frame(self) -> tuple[bool, int, bytes]:
        first, second = await self.reader.readexactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await self.reader.readexactly(8))
        mask = await self.reader.readexactly(4) if second & 0x80 else None
        payload = await self.reader.readexactly(length) if length else b""
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bool(first & 0x80), first & 0x0F, payload

    async def recv(self) -> str | None:
        """The next text message, or None once the server closed the socket."""
        parts: list[bytes] = []
        while True:
            try:
                fin, opcode, payload = await self._frame()
            except (asyncio.IncompleteReadError, ConnectionError):
                self.closed = True
                return None
            if opcode == PING:
                await self._send(PONG, payload)
            elif opcode == CLOSE:
                if not self.closed:
                    self.closed = True
                    await self._send(CLOSE, payload[:2])
                return None
            elif opcode in (TEXT, BINARY, CONTINUATION):
                parts.append(payload)
                if fin:
                    return b"".join(parts).decode()

    async def recv_json(self) -> dict | None:
        text = await self.recv()
        return None if text is None else json.loads(text)

    async def _send(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        length = len(payload)
        if length < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
        elif length < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        try:
            self.writer.write(head + mask + masked)
            await self.writer.drain()
        except ConnectionError:
            self.closed = True

    async def send_json(self, data) -> None:
        await self._send(TEXT, json.dumps(data).encode())

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self._send(CLOSE, struct.pack("!H", 1000))
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 5)
        except (TimeoutError, ConnectionError):
            pass
