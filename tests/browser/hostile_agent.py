"""A real AG-UI agent whose every field tries to run script in a reviewer's browser.

A ThreadingHTTPServer on a free loopback port, like tests/e2e/scripted_agent.py.
Path ``/hostile/`` streams text, a tool call, its result, state, messages, a
custom event, and ends with interrupts whose ids, reasons, messages, metadata
and responseSchemas carry payloads; ``/failing/`` ends its run with a RUN_ERROR
whose code and message do. A resume (nothing should ever send one) succeeds.

Every payload, if it ever ran, would leave a mark the test reads: it sets
``window.__pwned``, sets the tab title to PWNED, and POSTs an approval of every
card's decide form with the page's CSRF token (so a run that slipped through
also shows as a decided interrupt via the API).
"""

from __future__ import annotations

import json

from ..loopback import LoopbackAgent, frame, send, stream

MARK = "PWNED"
# Single quotes only: it goes inside double-quoted attributes below.
JS = ("window.__pwned=1;document.title='PWNED';"
      "document.querySelectorAll('form[action*=decide]').forEach(function(f){"
      "var d=new FormData(f);d.set('action','approve');fetch(f.action,{method:'POST',body:d})})")
SHORT_JS = "window.__pwned=1;document.title='PWNED'"

PAYLOADS = {
    "img": f'<img src=x onerror="{JS}">',
    "script": f"<script>{JS}</script>",
    "svg": f'<svg onload="{JS}"><animate onbegin="{JS}" attributeName=x dur=1s></animate></svg>',
    "javascript-url": f'<a href="javascript:{JS}">{MARK} link</a>',
    "autofocus": f'<input autofocus onfocus="{JS}">',
    "details": f'<details open ontoggle="{JS}"><summary>{MARK}</summary></details>',
    "hover": f'<b onmouseover="{JS}" onclick="{JS}">{MARK} hover</b>',
    "iframe": f'<iframe srcdoc="<script>parent.{SHORT_JS}</script>"></iframe>',
    "htmx": f'<div hx-get="/inbox/" hx-trigger="load" hx-on::load="{JS}" hx-on:click="{JS}">{MARK} htmx</div>',
    "template": "{{constructor.constructor('" + SHORT_JS.replace("'", "") + "')()}} ${alert(1)}",
    "closing": f'</script></textarea></title></style>"\'><img src=x onerror="{JS}">',
}
TEXT = f"{MARK} " + " ".join(PAYLOADS.values())
# For fields the hub bounds to 200 characters (interrupt id, reason), and for
# schemas, which the hub bounds to 64 KiB.
SHORT = f'{MARK}<img src=x onerror="{SHORT_JS}">'
JAVASCRIPT_URL = f"javascript:{JS}"
EVIL_ATTRIBUTES = {"autofocus": "", "onfocus": JS, "onmouseover": JS, "onclick": JS, "onload": JS,
                   "style": "position:fixed;inset:0;z-index:9999"}
LINKS = [{"href": JAVASCRIPT_URL, "rel": SHORT, "mediaType": "text/html", "class": MARK},
         {"href": JAVASCRIPT_URL, "rel": "describedby"}, {"href": "{{self}}", "rel": "x", "download": True}]


def _renderer_keywords() -> dict:
    """json-editor keywords that build markup: none may reach the page."""
    return {
        "options": {"inputAttributes": EVIL_ATTRIBUTES, "containerAttributes": EVIL_ATTRIBUTES,
                    "infoText": SHORT, "enum_titles": [SHORT], "upload": {"upload_handler": "alert"},
                    "cleave": {"onValueChanged": "alert"}},
        "links": LINKS,
        "headerTemplate": SHORT + " {{ self }}",
        "template": "{{ self }}" + SHORT,
        "watch": {"x": "root"},
        "media": {"type": "text/html", "binaryEncoding": "base64"},
        "enumSource": [{"source": [SHORT], "title": SHORT + "{{item}}", "value": "{{item}}"}],
    }


def form_schema() -> dict:
    """An input_required schema: payloads in every annotation, and every renderer keyword."""
    return {
        "type": "object",
        "title": TEXT,
        "description": TEXT,
        **_renderer_keywords(),
        "properties": {
            "note": {
                "type": "string",
                "title": TEXT,
                "description": TEXT,
                "default": TEXT,
                "examples": [SHORT],
                **_renderer_keywords(),
            },
            "choice": {"type": "string", "title": TEXT, "enum": [TEXT, "plain"], "default": TEXT},
            "flag": {
                "type": "boolean",
                "title": SHORT,
                "description": SHORT,
                "options": {"inputAttributes": EVIL_ATTRIBUTES},
            },
            "count": {"type": "integer", "title": SHORT, "minimum": 0, "default": 1},
            "when": {"$ref": "#/$defs/when"},
            "rich": {"type": "string", "format": "html", "title": SHORT},
            "upload": {"type": "string", "format": "url", "title": SHORT, "links": LINKS},
            "info": {"format": "info", "title": SHORT, "description": SHORT},
            "tags": {
                "type": "array",
                "title": SHORT,
                "items": {"type": "string", "title": SHORT, "default": SHORT, **_renderer_keywords()},
            },
            "either": {
                "title": SHORT,
                "oneOf": [
                    {"type": "string", "title": SHORT, **_renderer_keywords()},
                    {"type": "integer", "title": SHORT},
                ],
            },
            SHORT: {"type": "string"},  # a property name is shown as the label when there is no title
            # json-editor's enum editor writes an object value's keys into innerHTML.
            "pick": {
                "type": "object",
                "enum": [{f"<button formaction='/interrupts/1/decide/'>{SHORT}</button>": 1}],
                "const": {f"<b formaction='x'>{SHORT}</b>": 1},
                "default": {f"<i formaction='x'>{SHORT}</i>": 1},
            },
        },
        "$defs": {"when": {"type": "string", "format": "date", "title": SHORT, **_renderer_keywords()}},
        "required": ["note"],
    }


def edit_schema() -> dict:
    """A tool-call approval with editedArgs: the card offers Approve/Reject and Edit & approve."""
    return {"type": "object", "title": TEXT, "properties": {
        "approved": {"type": "boolean", "title": SHORT, **_renderer_keywords()},
        "editedArgs": {"type": "object", "title": TEXT, "description": TEXT, **_renderer_keywords(),
                       "properties": {"html": {"type": "string", "title": TEXT, "default": TEXT}}}},
        "required": ["approved"]}


def hostile_run(body: dict) -> list[dict]:
    """One run that uses every event type an agent can put text in, ending in interrupts."""
    thread, run = body["threadId"], body["runId"]
    if body.get("resume"):
        return [{"type": "RUN_STARTED", "threadId": thread, "runId": run},
                {"type": "RUN_FINISHED", "threadId": thread, "runId": run, "outcome": {"type": "success"}}]
    return [
        {"type": "RUN_STARTED", "threadId": thread, "runId": run},
        {"type": "STEP_STARTED", "stepName": TEXT},
        {"type": "TEXT_MESSAGE_START", "messageId": "m-hostile", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-hostile", "delta": TEXT},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-hostile", "delta": " " + PAYLOADS["img"]},
        {"type": "TEXT_MESSAGE_END", "messageId": "m-hostile"},
        {"type": "TOOL_CALL_START", "toolCallId": "tc-hostile", "toolCallName": TEXT},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "tc-hostile", "delta": json.dumps({"html": TEXT, TEXT: [TEXT]})[:40]},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "tc-hostile", "delta": json.dumps({"html": TEXT, TEXT: [TEXT]})[40:]},
        {"type": "TOOL_CALL_END", "toolCallId": "tc-hostile"},
        {"type": "TOOL_CALL_START", "toolCallId": "tc-done", "toolCallName": SHORT},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "tc-done", "delta": json.dumps({"q": TEXT})},
        {"type": "TOOL_CALL_END", "toolCallId": "tc-done"},
        {"type": "TOOL_CALL_RESULT", "messageId": "m-result", "toolCallId": "tc-done", "content": TEXT},
        {"type": "STATE_SNAPSHOT", "snapshot": {TEXT: TEXT, "nested": {"list": [TEXT, {SHORT: TEXT}]}}},
        {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/added", "value": TEXT}]},
        {"type": "MESSAGES_SNAPSHOT", "messages": [
            {"id": "m-user", "role": "user", "content": TEXT},
            {"id": "m-hostile", "role": "assistant", "content": TEXT, "toolCalls": [
                {"id": "tc-hostile", "type": "function",
                 "function": {"name": SHORT, "arguments": json.dumps({"html": TEXT})}}]},
        ]},
        {"type": "CUSTOM", "name": TEXT, "value": {TEXT: TEXT, "list": [TEXT]}},
        {"type": "STEP_FINISHED", "stepName": TEXT},
        {"type": "RUN_FINISHED", "threadId": thread, "runId": run, "outcome": {"type": "interrupt", "interrupts": [
            {"id": SHORT, "reason": "tool_call", "message": TEXT, "toolCallId": "tc-hostile",
             "metadata": {TEXT: TEXT, "nested": [{SHORT: TEXT}], "href": JAVASCRIPT_URL},
             "responseSchema": edit_schema()},
            {"id": "form-" + SHORT, "reason": SHORT, "message": TEXT, "metadata": {"why": TEXT},
             "responseSchema": form_schema()},
            {"id": "json-" + SHORT, "reason": "input_required", "message": TEXT, "metadata": {TEXT: TEXT},
             "responseSchema": {"type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(600)},
                                "title": TEXT, **_renderer_keywords()}},  # past the bounds: answered as JSON
        ]}},
    ]


def failing_run(body: dict) -> list[dict]:
    thread, run = body["threadId"], body["runId"]
    return [
        {"type": "RUN_STARTED", "threadId": thread, "runId": run},
        {"type": "TEXT_MESSAGE_START", "messageId": "m-fail", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-fail", "delta": TEXT},
        {"type": "TEXT_MESSAGE_END", "messageId": "m-fail"},
        {"type": "RUN_ERROR", "code": SHORT, "message": TEXT},
    ]


SCRIPTS = {"hostile": hostile_run, "failing": failing_run}


class HostileAgent(LoopbackAgent):
    def answer(self, handler, path, body):
        script = SCRIPTS.get(path)
        if script is None:
            return send(handler, 404, "text/plain", b"")
        stream(handler, (frame(event) for event in script(body)))
