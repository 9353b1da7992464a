"""Parse AG-UI JSON into the official ``ag-ui-protocol`` models, and back.

The models themselves come from the package; this module only decides what a
refusal says. Pydantic's errors name tagged-union branches and Python-side
locations; an agent author needs the wire name of the field and the rule that
was broken, under a stable code, so each failure is translated here into one
``MalformedMessage``.
"""

from __future__ import annotations

import json
import math
import re
from itertools import compress
from typing import Any, get_args

from ag_ui.core import Event, EventType, ResumeEntry, ResumeStatus, RunAgentInput
from pydantic import BaseModel, TypeAdapter, ValidationError

from .errors import MalformedMessage
from .sse import SSEFrame

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
# pydantic-core refuses to serialise data nested about 255 levels deep, so
# anything deeper would parse, then fail when stored or re-sent. Refusing it
# at the door keeps every accepted message dumpable.
MAX_DEPTH = 200

_is_container = frozenset({dict, list}).__contains__
_EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
_EVENT_TYPES = frozenset(member.value for member in EventType)
_RESUME_STATUSES = get_args(ResumeStatus)
# What pydantic's JSON parser takes that ``json.loads`` with our hooks refuses
# or reads otherwise: NaN and Infinity (tested with ``in``, which is cheap),
# a float that overflows (a three-digit exponent, or 300 digits in a row,
# which also covers integers too long for Python), and an integer Python will
# not convert (thousands of digits). Text showing any of them takes the full
# path, which says what is wrong.
_EXPONENT = re.compile(r"[eE][+-]?[0-9]{3}")
_DIGITS = re.compile(r"[0-9]{300}")


def parse_event(
    data: str | bytes | dict[str, Any], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> Event:
    """Turn one event's JSON (or its decoded dict) into its ``ag_ui.core`` model, or refuse it.

    The checks that run before the model (object, ``type`` present and known,
    a non-empty interrupt list) exist because pydantic's own errors for those
    cases are a union-tag dump that does not tell an agent author what to fix.
    """
    if isinstance(data, str):
        event = _parse_event_text(data, max_bytes)
        if event is not None:
            return event
    raw = _decode(data, max_bytes, "The event")
    if not isinstance(raw, dict):
        raise MalformedMessage(
            "NOT_AN_OBJECT",
            f"An AG-UI event must be a JSON object, got a JSON {_kind(raw)}.",
        )
    event_type = raw.get("type")
    if event_type is None:
        raise MalformedMessage(
            "MISSING_TYPE",
            "The event has no 'type'; every AG-UI event names its type, such as 'RUN_STARTED'.",
            field="type",
        )
    if not isinstance(event_type, str) or event_type not in _EVENT_TYPES:
        raise MalformedMessage(
            "UNKNOWN_EVENT_TYPE",
            f"{json.dumps(event_type)} is not an AG-UI event type{_type_hint(event_type)}",
            field="type",
            type=event_type,
        )
    raw, _unknown = strip_unknown_outcome(raw)
    outcome = raw.get("outcome")
    if (
        event_type == EventType.RUN_FINISHED.value
        and isinstance(outcome, dict)
        and outcome.get("type") in ("success", "cancelled")
        and "interrupts" in outcome
    ):
        # Only the interrupt outcome carries interrupts; the others are closed objects (C11, P37).
        raise MalformedMessage(
            "INTERRUPTS_OUTSIDE_INTERRUPT_OUTCOME",
            f"RUN_FINISHED has a {json.dumps(outcome.get('type'))} outcome carrying 'interrupts'; only an "
            "interrupt outcome ({\"type\": \"interrupt\"}) may carry them.",
            field="outcome.interrupts",
        )
    if (
        event_type == EventType.RUN_FINISHED.value
        and isinstance(outcome, dict)
        and outcome.get("type") == "interrupt"
        and outcome.get("interrupts") == []
    ):
        raise MalformedMessage(
            "EMPTY_INTERRUPTS",
            "RUN_FINISHED has an interrupt outcome with an empty 'interrupts' list; an "
            "interrupt outcome must carry at least one interrupt (send outcome "
            "{\"type\": \"success\"} when nothing is waiting).",
            field="outcome.interrupts",
        )
    try:
        return _EVENT_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise _refusal(exc, raw, event_type) from exc


_OUTCOMES = frozenset({"success", "interrupt", "cancelled"})


def strip_unknown_outcome(raw: Any) -> tuple[Any, str | None]:
    """A RUN_FINISHED without an outcome variant 1.0 does not define, and that variant's type; else (raw, None).

    An unrecognised union member is stripped, not fatal, which leaves the
    outcome absent and so success (C3); the caller warns with the type.
    A variant without a string ``type`` is malformed and left for the model to refuse.
    """
    if not isinstance(raw, dict) or raw.get("type") != EventType.RUN_FINISHED.value:
        return raw, None
    outcome = raw.get("outcome")
    kind = outcome.get("type") if isinstance(outcome, dict) else None
    if not isinstance(kind, str) or kind in _OUTCOMES:
        return raw, None
    return {key: value for key, value in raw.items() if key != "outcome"}, kind


def _parse_event_text(text: str, max_bytes: int) -> Event | None:
    """The event, parsed once by pydantic's JSON path; None when only the full path can say.

    Taken only where it must agree with the full path: within the size limit
    (a character is at most four bytes), too shallow to pass MAX_DEPTH (fewer
    brackets than levels), no number pydantic reads otherwise, and not a
    RUN_FINISHED (the full path checks its interrupts, once a run). Anything
    the model refuses goes the full path too, for its wire-worded refusal.
    """
    if (len(text) * 4 > max_bytes or text.count("{") + text.count("[") > MAX_DEPTH
            or "NaN" in text or "Infinity" in text or _EXPONENT.search(text) is not None
            or (len(text) >= 300 and _DIGITS.search(text) is not None)):
        return None
    try:
        event = _EVENT_ADAPTER.validate_json(text)
    except ValidationError:
        return None
    return None if event.type is EventType.RUN_FINISHED else event


def parse_frame(frame: SSEFrame, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Event:
    """Parse the event an SSE frame carries.

    AG-UI puts the event type inside the JSON; the frame's SSE ``event:`` name
    is not part of the protocol, so it is neither required nor compared.
    """
    return parse_event(frame.data, max_bytes=max_bytes)


def parse_run_input(
    data: str | bytes | dict[str, Any], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> RunAgentInput:
    """Turn a run request (JSON text or an already-decoded dict) into ``RunAgentInput``.

    Besides the model's own rules, a resume entry's ``metadata`` is refused
    unless it is an object: the spec says it is absent or an object, never
    null, but the model's ``Optional`` field would quietly accept null.
    """
    raw = _decode(data, max_bytes, "The request body")
    if not isinstance(raw, dict):
        raise MalformedMessage(
            "NOT_AN_OBJECT",
            f"A RunAgentInput must be a JSON object, got a JSON {_kind(raw)}.",
        )
    _check_resume(raw)
    try:
        return RunAgentInput.model_validate(raw)
    except ValidationError as exc:
        raise _refusal(exc, raw, "RunAgentInput") from exc


def _aliases(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(field.alias or name for name, field in model.model_fields.items())


_INPUT_KEYS = _aliases(RunAgentInput)
_ENTRY_KEYS = _aliases(ResumeEntry)


def known_input(run_input: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``run_input`` with only what AG-UI's RunAgentInput and ResumeEntry define, and the paths left out.

    AG-UI 1.0 C17: a consumer removes unrecognised material from the input
    immediately before sending it (and should warn), as the models, which
    keep extra fields, would not. What the fields hold (messages, state,
    forwardedProps, an entry's metadata) is the agent's or the client's and passes as it is.
    """
    removed = [key for key in run_input if key not in _INPUT_KEYS]
    kept = {key: value for key, value in run_input.items() if key in _INPUT_KEYS}
    if isinstance(kept.get("resume"), list):
        entries = []
        for index, entry in enumerate(kept["resume"]):
            if isinstance(entry, dict):
                removed += [f"resume[{index}].{key}" for key in entry if key not in _ENTRY_KEYS]
                entry = {key: value for key, value in entry.items() if key in _ENTRY_KEYS}
            entries.append(entry)
        kept["resume"] = entries
    return kept, removed


def dump(model: BaseModel) -> dict[str, Any]:
    """The model as the JSON-ready dict the package puts on the wire.

    camelCase keys, optional fields without a value left out, unknown fields
    kept: storing this keeps an event exactly as the agent could have sent it,
    and ``parse_event(json.dumps(dump(e)))`` gives back an equal model.
    """
    return model.model_dump(mode="json", by_alias=True)


def _decode(data: Any, max_bytes: int, subject: str) -> Any:
    # A dict arrives already decoded (a framework's parsed body, a stored
    # event); it still gets the depth check, since it never saw json.loads.
    if not isinstance(data, (str, bytes, bytearray)):
        _check_depth(data, subject)
        return data
    if isinstance(data, str):
        size = len(data.encode("utf-8", "surrogatepass"))
    else:
        size = len(data)
    if size > max_bytes:
        raise MalformedMessage(
            "TOO_LARGE",
            f"{subject} is {size} bytes, over the {max_bytes}-byte limit.",
            size=size,
            limit=max_bytes,
        )
    if isinstance(data, (bytes, bytearray)):
        try:
            data = data.decode("utf-8-sig")  # a BOM is tolerated, as RFC 8259 allows
        except UnicodeDecodeError as exc:
            raise MalformedMessage(
                "BAD_ENCODING",
                f"{subject} is not valid UTF-8 at byte {exc.start} ({exc.reason}); "
                "JSON must be sent as UTF-8.",
                position=exc.start,
            ) from exc
    try:
        if data.startswith("\ufeff"):  # what json.loads says of text that kept its BOM
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", data, 0)
        value = _DECODER.decode(data)
    except json.JSONDecodeError as exc:
        raise MalformedMessage(
            "BAD_JSON",
            f"{subject} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
            position=exc.pos,
            line=exc.lineno,
            column=exc.colno,
        ) from exc
    except RecursionError as exc:
        raise _too_deep(subject) from exc
    except ValueError as exc:  # e.g. an integer with more digits than Python will convert
        raise MalformedMessage("BAD_JSON", f"{subject} is not usable JSON: {exc}.") from exc
    if data.count("{") + data.count("[") > MAX_DEPTH:  # fewer brackets than levels cannot nest too deep
        _check_depth(value, subject)
    return value


def _refuse_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and neither would
    # the database or the browser we pass the event on to.
    raise MalformedMessage(
        "BAD_JSON",
        f"The JSON contains {name}, which is not a JSON value; send a number, a string or null.",
    )


def _parse_float(text: str) -> float:
    # 1e400 would silently become infinity, which no JSON encoder can write back.
    value = float(text)
    if math.isinf(value):
        raise MalformedMessage(
            "BAD_JSON", f"The JSON number {text} is too large to represent; send it as a string."
        )
    return value


# One decoder for every call: json.loads with hooks builds a new one each time.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_parse_float)


def _check_depth(value: Any, subject: str) -> None:
    # Level by level rather than recursively, so the check cannot overflow
    # the stack it protects; compress/map keep the per-child filtering in C,
    # which makes a large flat payload cost about as much as json.loads did.
    level = [value] if _is_container(type(value)) else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise _too_deep(subject)
        below: list[Any] = []
        for node in level:
            children = node.values() if type(node) is dict else node
            below.extend(compress(children, map(_is_container, map(type, children))))
        level = below


def _too_deep(subject: str) -> MalformedMessage:
    return MalformedMessage(
        "BAD_JSON",
        f"{subject} nests objects and arrays more than {MAX_DEPTH} levels deep; flatten it.",
        limit=MAX_DEPTH,
    )


def _check_resume(raw: dict[str, Any]) -> None:
    resume = raw.get("resume")
    if not isinstance(resume, list):
        return  # absent, or a shape the model itself will refuse
    for index, entry in enumerate(resume):
        if not isinstance(entry, dict):
            continue
        if "metadata" in entry and not isinstance(entry["metadata"], dict):
            field = f"resume[{index}].metadata"
            raise MalformedMessage(
                "INVALID_METADATA",
                f"'{field}' is {_kind(entry['metadata'], article=True)}; resume metadata must "
                "be an object or be left out, never null.",
                field=field,
            )
        if "status" in entry and entry["status"] not in _RESUME_STATUSES:
            field = f"resume[{index}].status"
            allowed = " or ".join(f"'{status}'" for status in _RESUME_STATUSES)
            raise MalformedMessage(
                "INVALID_FIELD",
                f"RunAgentInput has an invalid field '{field}': {json.dumps(entry['status'])} is "
                f"not one of {allowed}. A denial is a resolved entry whose payload says so, "
                "such as {\"approved\": false}.",
                field=field,
                allowed=list(_RESUME_STATUSES),
            )


def _refusal(exc: ValidationError, raw: dict[str, Any], subject: str) -> MalformedMessage:
    errors = exc.errors(include_url=False, include_input=False)
    paths = [_wire_path(error, raw) for error in errors]
    # A value that fits no branch of a plain union (a message's content is a
    # string or a list of parts) yields one error per branch; the deepest one
    # is the branch the sender was attempting, so it is the one to report.
    chosen = max(range(len(errors)), key=lambda i: len(paths[i]))
    first, field = errors[chosen], _format_path(paths[chosen])
    # Other branches' complaints sit on a prefix of the chosen path: not new problems.
    others = len({_format_path(p) for p in paths if p != paths[chosen][: len(p)]})
    more = f" ({others} more problem{'s' if others > 1 else ''} after this one)" if others else ""
    if first["type"] in ("missing", "union_tag_not_found"):
        return MalformedMessage(
            "MISSING_FIELD", f"{subject} is missing required field '{field}'{more}.", field=field
        )
    return MalformedMessage(
        "INVALID_FIELD",
        f"{subject} has an invalid field '{field}': {first['msg']}{more}.",
        field=field,
        reason=first["msg"],
    )


def _wire_path(error: dict[str, Any], raw: Any) -> list[str | int]:
    """The error's location as the sender wrote it, e.g. ``outcome.interrupts[0].reason``.

    Pydantic's location mixes data keys with union bookkeeping (the chosen
    branch's tag such as ``RUN_FINISHED``, or a branch label such as ``str``).
    Walking the received data along it keeps exactly the steps that exist in
    the data; the rest is bookkeeping and is dropped.
    """
    loc = error["loc"]
    missing = error["type"] == "missing"
    parts: list[str | int] = []
    node = raw
    for position, step in enumerate(loc):
        if missing and position == len(loc) - 1:
            parts.append(step)  # the absent key itself
        elif isinstance(node, dict) and step in node:
            parts.append(step)
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            parts.append(step)
            node = node[step]
    if error["type"] in ("union_tag_not_found", "union_tag_invalid"):
        parts.append(str(error.get("ctx", {}).get("discriminator", "type")).strip("'"))
    return parts


def _format_path(parts: list[str | int]) -> str:
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _type_hint(event_type: Any) -> str:
    if not isinstance(event_type, str):
        return "."
    if event_type.upper() in _EVENT_TYPES:
        return f"; event types are upper case, did you mean '{event_type.upper()}'?"
    if event_type.startswith("THINKING_"):
        return "; the THINKING_* events left the protocol in 1.0, send REASONING_* events instead."
    return "."


def _kind(value: Any, article: bool = False) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        kind = "boolean"
    elif isinstance(value, (int, float)):
        kind = "number"
    else:
        kind = {dict: "object", list: "array", str: "string"}.get(type(value), type(value).__name__)
    if article:
        return ("an " if kind[0] in "aeiou" else "a ") + kind
    return kind
