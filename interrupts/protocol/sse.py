"""Read and write ``text/event-stream`` frames.

The reader follows the event-stream interpretation of the WHATWG HTML
standard (server-sent events), because agents are written against many SSE
libraries and every one of them is allowed to use any of its line endings,
comments and field spellings. The writer for AG-UI events delegates to the
``ag-ui-protocol`` encoder so what we send is byte-for-byte what the reference
SDK sends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ag_ui.core import BaseEvent
from ag_ui.encoder import EventEncoder

from .errors import MalformedStream

CONTENT_TYPE = "text/event-stream"
DEFAULT_MAX_FRAME_BYTES = 8 * 1024 * 1024

_BOM = b"\xef\xbb\xbf"
# CR and LF are ASCII and never occur inside a multi-byte UTF-8 sequence, so
# lines can be cut on bytes and each complete line decoded on its own: a
# character split across chunks is simply still pending.
_EOL = re.compile(rb"\r\n|\r|\n")
_TEXT_EOL = re.compile(r"\r\n|\r|\n")
_ENCODER = EventEncoder()


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None  # _take_raw decodes the line again, to say where it is wrong


@dataclass(frozen=True)
class SSEFrame:
    """One dispatched event of the stream.

    ``event`` is None when the frame named no event type (the spec's default
    "message"). ``id`` is the stream's *last event ID* at dispatch time, which
    the spec carries over from earlier frames until an ``id:`` line changes it:
    it is what a client sends back as ``Last-Event-ID`` when it reconnects.
    """

    data: str
    event: str | None = None
    id: str | None = None


class SSEReader:
    """Incremental parser: bytes in, whole frames out.

    Feed it network chunks exactly as they arrive; a frame, a line, a CRLF
    pair or a UTF-8 character may be cut anywhere. Work is linear in the bytes
    fed: a partial line is kept as a list of pieces and joined once, when its
    line ending arrives, so a large frame arriving in many small chunks is
    never re-scanned. After a ``MalformedStream`` the reader's state is
    undefined; abandon the stream.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.retry: int | None = None  # the last valid ``retry:`` in milliseconds
        self.last_event_id = ""
        self._head = b""  # the first bytes, held until we know whether they are a BOM
        self._started = False
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF completes CRLF
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._offset = 0  # stream offset of the next byte fed, for error messages
        self._line_start = 0
        self._data: list[str] = []
        self._data_size = 0
        self._event = ""
        self._closed = False

    def feed(self, chunk: bytes) -> list[SSEFrame]:
        """Consume the next bytes of the stream and return the frames they complete.

        Returns an empty list while a frame is still incomplete, so callers can
        loop over ``feed`` for every chunk without buffering themselves.
        """
        frames: list[SSEFrame] = []
        chunk = self._strip_bom(chunk)
        if not chunk:
            return frames
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                self._offset += 1
                self._line_start = self._offset
        base = self._offset
        start = 0
        if b"\r" in chunk:
            for match in _EOL.finditer(chunk):
                self._check_size(self._pending_size + match.start() - start)
                self._pending.append(chunk[start : match.start()])
                self._take_line(frames)
                start = match.end()
                self._line_start = base + start
        elif (last := chunk.rfind(b"\n")) >= 0:
            # LF only, the usual case: one split in C instead of a regex match per line.
            lines = chunk[:last].split(b"\n")
            if self._pending:
                first = lines.pop(0)
                self._check_size(self._pending_size + len(first))
                self._pending.append(first)
                self._take_line(frames)
                start = len(first) + 1
                self._line_start = base + start
            # The two lines of nearly every frame ("data: ...", then blank)
            # are handled inline; any other line, or a fault, goes through
            # _take_raw, which says where it is.
            limit = self.max_frame_bytes
            for line in lines:
                if not line:
                    if self._data:
                        frames.append(SSEFrame("\n".join(self._data), self._event or None,
                                               self.last_event_id or None))
                        self._data = []
                    self._data_size = 0
                    self._event = ""
                elif line[:5] == b"data:" and self._data_size + len(line) <= limit and (
                        value := _utf8(line[6:] if line[5:6] == b" " else line[5:])) is not None:
                    self._data.append(value)
                    self._data_size += len(line)
                else:
                    self._line_start = base + start
                    self._check_size(len(line))
                    self._take_raw(line, frames)
                start += len(line) + 1
            start = last + 1
            self._line_start = base + start
        # A chunk ending in a lone CR has already ended its line; remember it so
        # an LF opening the next chunk is read as the rest of a CRLF, not as a
        # blank line that would dispatch early.
        self._skip_lf = chunk.endswith(b"\r")
        if start < len(chunk):
            self._check_size(self._pending_size + len(chunk) - start)
            self._pending.append(chunk[start:])
            self._pending_size += len(chunk) - start
        self._offset = base + len(chunk)
        return frames

    def close(self) -> list[SSEFrame]:
        """Finish the stream and return the frame it ended in, if any.

        The spec discards an event not followed by a blank line; we deliver it,
        because agents that close the connection right after their last
        ``data:`` line (RUN_FINISHED, typically) would otherwise lose the one
        event that says how the run ended. Calling ``close`` twice is harmless.
        """
        if self._closed:
            return []
        self._closed = True
        frames: list[SSEFrame] = []
        if not self._started:
            self._started = True
            self._pending.append(self._head)  # a stream shorter than a BOM
            self._pending_size += len(self._head)
        if self._pending_size:
            self._take_line(frames)
        self._dispatch(frames)
        return frames

    def _strip_bom(self, chunk: bytes) -> bytes:
        if self._started:
            return chunk
        self._head += chunk
        if len(self._head) < len(_BOM) and _BOM.startswith(self._head):
            return b""  # too short to tell yet
        self._started = True
        head, self._head = self._head, b""
        if head.startswith(_BOM):
            self._offset = self._line_start = len(_BOM)
            return head[len(_BOM) :]
        return head

    def _check_size(self, line_size: int) -> None:
        # Checked before a line is stored, so a peer that never sends a line
        # ending cannot make us hold more than the bound.
        if self._data_size + line_size > self.max_frame_bytes:
            raise MalformedStream(
                "FRAME_TOO_LARGE",
                f"An event-stream frame exceeds {self.max_frame_bytes} bytes; "
                "the agent must split its output into smaller events.",
                limit=self.max_frame_bytes,
                offset=self._line_start,
            )

    def _take_line(self, frames: list[SSEFrame]) -> None:
        raw = b"".join(self._pending)
        self._pending.clear()
        self._pending_size = 0
        self._take_raw(raw, frames)

    def _take_raw(self, raw: bytes, frames: list[SSEFrame]) -> None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            offset = self._line_start + exc.start
            raise MalformedStream(
                "BAD_ENCODING",
                f"The event stream is not valid UTF-8 at byte {offset} ({exc.reason}); "
                "the agent must send text/event-stream encoded as UTF-8.",
                offset=offset,
            ) from exc
        self._process(line, len(raw), frames)

    def _process(self, line: str, size: int, frames: list[SSEFrame]) -> None:
        if not line:
            self._dispatch(frames)
            return
        if line[0] == ":":
            return  # a comment, typically a keepalive
        name, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_size += size
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:  # the spec ignores such ids
                self.last_event_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry = int(value)
        # Any other field name is ignored, as the spec requires.

    def _dispatch(self, frames: list[SSEFrame]) -> None:
        if self._data:
            frames.append(
                SSEFrame("\n".join(self._data), self._event or None, self.last_event_id or None)
            )
        self._data = []
        self._data_size = 0
        self._event = ""


def encode_event(event: BaseEvent) -> str:
    """Serialise an AG-UI event as one SSE frame, exactly as the reference SDK does.

    Delegating to ``EventEncoder`` keeps our producers indistinguishable from
    any other Python AG-UI agent, and picks up the package's own choices (such
    as omitting optional fields without a value) when it changes them.
    """
    return _ENCODER.encode(event)


def format_frame(data: str, event: str | None = None, id: str | None = None) -> str:
    """Write an arbitrary frame, for streams that carry more than AG-UI events.

    Every line ending inside ``data`` (CRLF, LF or CR, exactly those the reader
    honours) starts a new ``data:`` line, so the reader rebuilds the text with
    LF line endings. ``event`` and ``id`` are single lines by nature and are
    refused when they are not, because a line break in them would inject
    fields into the stream.
    """
    lines = []
    for name, value in (("event", event), ("id", id)):
        if value is None:
            continue
        if _TEXT_EOL.search(value) or (name == "id" and "\0" in value):
            raise MalformedStream(
                "BAD_FRAME_FIELD",
                f"The SSE {name} field cannot contain a line break"
                + (" or a NUL character" if name == "id" else "")
                + f": {value!r}.",
                field=name,
            )
        lines.append(f"{name}: {value}\n")
    lines.extend(f"data: {part}\n" for part in _TEXT_EOL.split(data))
    return "".join(lines) + "\n"


def format_comment(text: str = "") -> str:
    """Write a comment line, which every reader ignores: keepalives and notes.

    Proxies close connections that stay silent; a comment keeps bytes moving
    without dispatching an event. Each line of ``text`` gets its own ``:``.
    """
    return "".join(f": {part}\n" if part else ":\n" for part in _TEXT_EOL.split(text))
