"""The event-stream reader and writer (interrupts/protocol/sse.py)."""


import pytest
from ag_ui.core import (
    CustomEvent,
    Interrupt,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
)
from ag_ui.encoder import EventEncoder
from hypothesis import given, settings
from hypothesis import strategies as st

from interrupts.protocol.errors import MalformedStream
from interrupts.protocol.sse import (
    CONTENT_TYPE,
    SSEFrame,
    SSEReader,
    encode_event,
    format_comment,
    format_frame,
)
from interrupts.protocol.wire import parse_frame


def read_all(stream: bytes, chunks=None, **kwargs) -> list[SSEFrame]:
    """Feed ``stream`` cut at the given positions, then close."""
    reader = SSEReader(**kwargs)
    frames = []
    cuts = [0, *sorted(chunks or []), len(stream)]
    for start, end in zip(cuts, cuts[1:], strict=False):
        frames += reader.feed(stream[start:end])
    return frames + reader.close()


def one_byte_at_a_time(stream: bytes, **kwargs) -> list[SSEFrame]:
    return read_all(stream, range(1, len(stream)), **kwargs)


# -- properties --------------------------------------------------------------

# Any text the stream can carry: no surrogates (not encodable as UTF-8).
_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_line = _text.map(lambda s: s.replace("\r", "").replace("\n", ""))
_frames = st.lists(
    st.tuples(
        _text | st.sampled_from(["", "\n", "\r\n", "a\rb", " lead", "x\n\ny", "é€😀"]),
        st.none() | _line,
        st.none() | _line.map(lambda s: s.replace("\0", "")).filter(bool),
    ),
    max_size=6,
)


def expected_frames(specs) -> list[SSEFrame]:
    """What the spec says a reader must rebuild from ``format_frame`` output."""
    out, last_id = [], None
    for data, event, id_ in specs:
        last_id = id_ if id_ is not None else last_id  # the last event ID carries over
        data = data.replace("\r\n", "\n").replace("\r", "\n")
        out.append(SSEFrame(data, event or None, last_id))
    return out


@settings(max_examples=300)
@given(
    specs=_frames,
    eol=st.sampled_from(["\n", "\r\n", "\r"]),
    bom=st.booleans(),
    trailing_blank_line=st.booleans(),
    data=st.data(),
)
def test_any_chunking_yields_the_frames_that_were_written(specs, eol, bom, trailing_blank_line, data):
    text = "".join(format_frame(d, e, i) for d, e, i in specs)
    if not trailing_blank_line and text:
        text = text[:-1]  # the last frame ends on its data line: close() must deliver it
    stream = (b"\xef\xbb\xbf" if bom else b"") + text.replace("\n", eol).encode("utf-8")
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12), label="cuts")

    whole = read_all(stream)
    assert whole == expected_frames(specs)
    assert read_all(stream, cuts) == whole
    assert one_byte_at_a_time(stream) == whole


@settings(max_examples=100)
@given(text=_text)
def test_a_comment_carries_any_text_and_dispatches_nothing(text):
    stream = (format_comment(text) + format_frame("after") + format_comment(text)).encode()
    assert one_byte_at_a_time(stream) == [SSEFrame("after")]


# -- the reader, case by case ------------------------------------------------


def test_multi_line_data_is_joined_with_lf():
    assert read_all(b"data: one\ndata:two\ndata:  three\n\n") == [SSEFrame("one\ntwo\n three")]


def test_event_and_id_fields_are_reported_and_the_id_carries_over():
    stream = b"event: progress\nid: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n"
    assert read_all(stream) == [
        SSEFrame("a", "progress", "7"),
        SSEFrame("b", None, "7"),  # no id line: the last event ID stays 7
        SSEFrame("c", None, None),  # a bare "id" resets it
    ]


def test_comments_retry_and_unknown_fields_are_not_data():
    reader = SSEReader()
    frames = reader.feed(b": keepalive\nretry: 2500\nfoo: bar\n:\ndata: x\n\n")
    assert frames == [SSEFrame("x")]
    assert reader.retry == 2500


def test_only_the_first_space_after_the_colon_is_stripped():
    stream = b"data:no-space\n\ndata:  two\n\ndata:\ttab\n\n"
    assert read_all(stream) == [SSEFrame("no-space"), SSEFrame(" two"), SSEFrame("\ttab")]


def test_a_line_without_colon_is_a_field_with_empty_value():
    assert read_all(b"data\ndata\n\n") == [SSEFrame("\n")]


def test_a_frame_without_data_lines_is_not_dispatched():
    assert read_all(b"event: ping\nid: 3\n\n: only a comment\n\n") == []


def test_event_name_does_not_leak_into_the_next_frame():
    assert read_all(b"event: a\n\ndata: x\n\n") == [SSEFrame("x")]


def test_an_id_containing_nul_is_ignored():
    assert read_all(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n")[1] == SSEFrame("b", None, "1")


def test_final_frame_without_blank_line_is_delivered_on_close():
    reader = SSEReader()
    assert reader.feed(b"data: first\n\ndata: last") == [SSEFrame("first")]
    assert reader.close() == [SSEFrame("last")]
    assert reader.close() == []


def test_final_frame_ended_by_a_single_line_ending_is_delivered_on_close():
    reader = SSEReader()
    assert reader.feed(b"data: last\r\n") == []
    assert reader.close() == [SSEFrame("last")]


def test_split_inside_a_multibyte_character():
    encoded = "data: é€😀\n\n".encode()
    for cut in range(len(encoded)):
        assert read_all(encoded, [cut]) == [SSEFrame("é€😀")], cut


def test_split_between_cr_and_lf_is_one_line_ending():
    # Had the LF been read as a second line ending, the first chunk's data
    # line would be followed by a blank line and dispatch on its own.
    reader = SSEReader()
    assert reader.feed(b"data: a\r") == []
    assert reader.feed(b"\ndata: b\r") == []
    assert reader.feed(b"\n\r") == [SSEFrame("a\nb")]
    assert reader.feed(b"\n") == []  # completes the CRLF of the blank line
    assert reader.close() == []


def test_lone_cr_line_endings():
    assert read_all(b"data: a\rdata: b\r\rdata: c\r\r") == [SSEFrame("a\nb"), SSEFrame("c")]


def test_a_leading_bom_is_stripped_even_when_split():
    stream = b"\xef\xbb\xbfdata: x\n\n"
    assert read_all(stream, [1]) == read_all(stream, [2]) == [SSEFrame("x")]


def test_only_a_leading_bom_is_stripped():
    assert read_all("data: \ufeffx\n\n".encode()) == [SSEFrame("\ufeffx")]
    # A second BOM at the start makes the first line's name "\ufeffdata", not "data".
    assert read_all(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []


def test_a_line_beyond_the_limit_is_refused_before_its_end_arrives():
    reader = SSEReader(max_frame_bytes=1024)
    reader.feed(b"data: " + b"x" * 1000)
    with pytest.raises(MalformedStream) as err:
        reader.feed(b"x" * 100)  # no line ending yet: still refused
    assert err.value.code == "FRAME_TOO_LARGE"
    assert "1024 bytes" in err.value.message
    assert err.value.details["limit"] == 1024


def test_many_lines_beyond_the_limit_are_refused():
    with pytest.raises(MalformedStream) as err:
        read_all(b"data: " + b"y" * 400 + b"\n" + b"data: " + b"y" * 400 + b"\n" * 2, max_frame_bytes=600)
    assert err.value.code == "FRAME_TOO_LARGE"


def test_the_limit_is_per_frame_not_per_stream():
    frame = b"data: " + b"z" * 500 + b"\n\n"
    assert len(read_all(frame * 10, max_frame_bytes=600)) == 10


def test_invalid_utf8_is_refused_with_its_offset():
    with pytest.raises(MalformedStream) as err:
        read_all(b"data: ok\n\ndata: \xff\n\n")
    assert err.value.code == "BAD_ENCODING"
    assert err.value.details["offset"] == 16
    assert "UTF-8" in err.value.message and "byte 16" in err.value.message


def test_a_character_cut_off_by_the_end_of_stream_is_refused():
    with pytest.raises(MalformedStream) as err:
        read_all("data: é".encode()[:-1])
    assert err.value.code == "BAD_ENCODING"


def test_a_large_frame_in_small_chunks_arrives_whole():
    # Its speed (linear, not quadratic, in the chunk count) is measured by
    # bench/sse_reader.py, not asserted here.
    payload = "p" * (1024 * 1024)
    stream = format_frame(payload).encode()
    reader = SSEReader()
    frames = []
    for start in range(0, len(stream), 64):
        frames += reader.feed(stream[start : start + 64])
    assert frames == [SSEFrame(payload)]


# -- the writer --------------------------------------------------------------


def test_format_frame_writes_one_data_line_per_line():
    assert format_frame("a\nb", event="e", id="1") == "event: e\nid: 1\ndata: a\ndata: b\n\n"


def test_format_frame_splits_only_on_sse_line_endings():
    # str.splitlines() would also cut at U+2028 and form feed, which SSE does not.
    data = "a\u2028b\x0cc\x1ed"
    assert format_frame(data).count("data:") == 1
    assert read_all(format_frame(data).encode()) == [SSEFrame(data)]


@pytest.mark.parametrize("field", ["event", "id"])
def test_format_frame_refuses_line_breaks_in_single_line_fields(field):
    with pytest.raises(MalformedStream) as err:
        format_frame("x", **{field: "a\nid: 99"})
    assert err.value.code == "BAD_FRAME_FIELD"
    assert field in err.value.message


def test_format_comment_prefixes_every_line():
    assert format_comment("ping") == ": ping\n"
    assert format_comment("a\r\nb") == ": a\n: b\n"
    assert format_comment() == ":\n"


def test_content_type_is_what_the_encoder_announces():
    assert CONTENT_TYPE == EventEncoder().get_content_type() == "text/event-stream"


# -- AG-UI events through the stream -----------------------------------------

EVENTS = [
    RunStartedEvent(thread_id="thread-1", run_id="run-1", protocol_version="1.0"),
    TextMessageContentEvent(message_id="m1", delta="line one\nline two\r\n« naïve » 😀"),
    StateSnapshotEvent(snapshot={"step": 3, "nested": {"list": [1, None, "x"]}}),
    CustomEvent(name="on_interrupt", value={"text": "data: not a field\n\n"}),
    RunFinishedEvent(
        thread_id="thread-1",
        run_id="run-1",
        outcome=RunFinishedInterruptOutcome(
            interrupts=[
                Interrupt(
                    id="int-abc123",
                    reason="tool_call",
                    tool_call_id="tc-001",
                    response_schema={"type": "object", "required": ["approved"]},
                )
            ]
        ),
    ),
]


def test_encode_event_is_the_reference_encoder():
    encoder = EventEncoder()
    for event in EVENTS:
        assert encode_event(event) == encoder.encode(event)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 64, 100_000])
def test_encoded_ag_ui_events_round_trip_through_the_reader(chunk_size):
    stream = "".join(encode_event(event) for event in EVENTS).encode()
    reader = SSEReader()
    frames = []
    for start in range(0, len(stream), chunk_size):
        frames += reader.feed(stream[start : start + chunk_size])
    frames += reader.close()
    parsed = [parse_frame(frame) for frame in frames]
    assert parsed == EVENTS
    assert [type(event) for event in parsed] == [type(event) for event in EVENTS]
