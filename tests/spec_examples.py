"""The examples of the AG-UI "Interrupts" page, in wire (camelCase) form.

One place for the four examples of reference/ag-ui/interrupts.mdx ("Examples"):
minimal tool approval, approve with edits, parallel interrupts and the non-tool
input request. Everything here is plain JSON-ready data, exactly as the spec
writes it: the interrupts, their response schemas, the RUN_FINISHED events that
carry them and the resume bodies that answer them.

The constants share their nested parts (an event holds its interrupt dicts, an
interrupt its schema), so a test that changes one must copy it first
(copy.deepcopy); a test that needs a model builds it, e.g.
``Interrupt.model_validate(spec_examples.EMAIL_EDIT)``.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- #
# Response schemas
# --------------------------------------------------------------------------- #

# Minimal tool approval (int-abc123).
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}},
    "required": ["approved"],
}

# Approve with edits (int-email-edit).
EDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "editedArgs": {
            "type": "object",
            "properties": {
                "to": {"type": "string", "format": "email"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
            },
        },
    },
    "required": ["approved"],
}

# Non-tool input request (int-form).
FORM_SCHEMA = {
    "type": "object",
    "properties": {
        "quarter": {"type": "string", "enum": ["Q1", "Q2", "Q3", "Q4"]},
        "year": {"type": "integer", "minimum": 2000},
        "revenue": {"type": "number"},
    },
    "required": ["quarter", "year", "revenue"],
}

# --------------------------------------------------------------------------- #
# Interrupts
# --------------------------------------------------------------------------- #

APPROVAL = {
    "id": "int-abc123",
    "reason": "tool_call",
    "message": "Send email to a@b.com with subject 'Hi'?",
    "toolCallId": "tc-001",
    "responseSchema": APPROVAL_SCHEMA,
}

EMAIL_EDIT = {
    "id": "int-email-edit",
    "reason": "tool_call",
    "message": "Send email to a@b.com? You can edit the body before approving.",
    "toolCallId": "tc-42",
    "responseSchema": EDIT_SCHEMA,
    "metadata": {"langgraph": {"checkpointId": "ckpt-xyz", "nodeId": "tool_executor"}},
}

PARALLEL = [
    {"id": "i-1", "reason": "tool_call", "toolCallId": "tc-a", "message": "Approve sendEmail to x@y.com?"},
    {"id": "i-2", "reason": "tool_call", "toolCallId": "tc-b", "message": "Approve sendEmail to y@z.com?"},
    {"id": "i-3", "reason": "tool_call", "toolCallId": "tc-c", "message": "Approve sendEmail to z@w.com?"},
]

FORM = {
    "id": "int-form",
    "reason": "input_required",
    "message": "Please provide the quarterly filing details.",
    "responseSchema": FORM_SCHEMA,
    "expiresAt": "2026-04-20T17:00:00Z",
}

# --------------------------------------------------------------------------- #
# The RUN_FINISHED events that raise them, and the resumes that answer them
# --------------------------------------------------------------------------- #


def _interrupted(thread_id: str, run_id: str, interrupts: list[dict]) -> dict:
    """A RUN_FINISHED event whose outcome is *interrupts*."""
    return {
        "type": "RUN_FINISHED",
        "threadId": thread_id,
        "runId": run_id,
        "outcome": {"type": "interrupt", "interrupts": interrupts},
    }


def _resume(thread_id: str, run_id: str, entries: list[dict]) -> dict:
    """A resume body as the spec writes it: without the messages a real client adds."""
    return {"threadId": thread_id, "runId": run_id, "resume": entries}


APPROVAL_EVENT = _interrupted("thread-1", "run-1", [APPROVAL])
APPROVAL_RESUME = _resume(
    "thread-1", "run-2", [{"interruptId": "int-abc123", "status": "resolved", "payload": {"approved": True}}]
)

EMAIL_EDIT_EVENT = _interrupted("thread-2", "run-10", [EMAIL_EDIT])
EMAIL_EDIT_RESUME = _resume(
    "thread-2",
    "run-11",
    [
        {
            "interruptId": "int-email-edit",
            "status": "resolved",
            "payload": {
                "approved": True,
                "editedArgs": {"to": "a@b.com", "subject": "Hi", "body": "Hi (revised per my note)"},
            },
        }
    ],
)

PARALLEL_EVENT = _interrupted("thread-3", "run-20", PARALLEL)
PARALLEL_RESUME = _resume(
    "thread-3",
    "run-21",
    [
        {"interruptId": "i-1", "status": "resolved", "payload": {"approved": True}},
        {"interruptId": "i-2", "status": "resolved", "payload": {"approved": True}},
        {"interruptId": "i-3", "status": "cancelled"},
    ],
)

FORM_EVENT = _interrupted("thread-4", "run-30", [FORM])
FORM_RESUME = _resume(
    "thread-4",
    "run-31",
    [{"interruptId": "int-form", "status": "resolved", "payload": {"quarter": "Q1", "year": 2026, "revenue": 4200000}}],
)

# The four examples in the spec's order.
EVENTS = [APPROVAL_EVENT, EMAIL_EDIT_EVENT, PARALLEL_EVENT, FORM_EVENT]
RESUMES = [APPROVAL_RESUME, EMAIL_EDIT_RESUME, PARALLEL_RESUME, FORM_RESUME]
