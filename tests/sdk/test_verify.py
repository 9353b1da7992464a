"""An SDK agent given a signing secret checks the request's signature and each answer's fingerprint.

The view tests run the real ``agent_view`` (Django's request factory calls
it as daphne would) and read the event stream it answers.
"""

import json
import time

import pytest
from ag_ui.core import RunAgentInput
from asgiref.sync import sync_to_async
from django.test import AsyncRequestFactory, override_settings

from interrupts.demo.views import agent_view
from interrupts.protocol import signing
from interrupts.protocol.wire import dump
from interrupts.sdk import Agent, InterruptDefinition, RunOutcome, run
from interrupts.sdk.verify import Approval, BadSignature, attested_approvals, check_signature

SECRET = "css_test-secret"

SHIP = InterruptDefinition(
    id="ship",
    response_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
)


class Shipper(Agent):
    """Asks once; on resume reports who the SDK says approved."""

    name = "shipper"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.ran = 0

    async def run(self, ctx):
        self.ran += 1
        answer = ctx.resume_for(SHIP)
        if answer is None:
            return RunOutcome.interrupt([SHIP.interrupt()])
        return RunOutcome.success(result={"approvers": [a.username for a in ctx.approvals_for(SHIP)]})


DECISIONS = [{"username": "ann", "userId": 7, "action": "approve", "at": "2026-01-02T03:04:05Z", "comment": "ok"}]


def entry(*, thread="t", parent="r1", interrupt_id="ship", tool_call_id=None, status="resolved",
          payload=None, fingerprint=None, decisions=DECISIONS) -> dict:
    payload = {"ok": True} if payload is None else payload
    fingerprint = fingerprint or signing.fingerprint(
        thread_id=thread, run_id=parent, interrupt_id=interrupt_id, tool_call_id=tool_call_id,
        status=status, payload=payload)
    return {"interruptId": interrupt_id, "status": status, "payload": payload,
            "metadata": {"countersign": {"decisions": decisions, "policy": {"name": "default", "requiredApprovals": 1},
                                         "fingerprint": fingerprint}}}


def resume_input(*entries, thread="t", messages=()) -> dict:
    return {"threadId": thread, "runId": "r2", "parentRunId": "r1", "messages": list(messages), "resume": list(entries)}


async def events_of(agent, body: dict, attested: bool) -> list[dict]:
    return [dump(e) async for e in run(agent, RunAgentInput.model_validate(body), attested=attested)]


# --- the driver: fingerprints and approvals ---------------------------------


async def test_an_attested_answer_names_its_approvers():
    agent = Shipper()
    events = await events_of(agent, resume_input(entry()), attested=True)
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["result"] == {"approvers": ["ann"]}


async def test_an_unattested_answer_names_nobody_even_with_an_attestation():
    events = await events_of(Shipper(), resume_input(entry()), attested=False)
    assert events[-1]["result"] == {"approvers": []}


@pytest.mark.parametrize("tampered", [
    entry(payload={"ok": False}, fingerprint=entry()["metadata"]["countersign"]["fingerprint"]),  # payload changed
    entry(thread="other-thread"),  # an answer from another thread
    entry(parent="r0"),  # an answer to another run
    entry(status="cancelled", fingerprint=entry()["metadata"]["countersign"]["fingerprint"]),
    entry(tool_call_id="tc-nobody-proposed"),
    {"interruptId": "ship", "status": "resolved", "payload": {"ok": True}},  # no attestation
    {**entry(), "metadata": {"countersign": {"decisions": DECISIONS}}},  # no fingerprint
])
async def test_a_signed_resume_whose_fingerprint_does_not_check_never_reaches_the_agent(tampered):
    agent = Shipper()
    events = await events_of(agent, resume_input(tampered), attested=True)
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "BAD_FINGERPRINT"
    assert agent.ran == 0


async def test_a_fingerprint_may_name_a_tool_call_of_the_signed_conversation():
    call = {"id": "tc-1", "type": "function", "function": {"name": "ship", "arguments": "{}"}}
    messages = [{"id": "m1", "role": "assistant", "toolCalls": [call]}]
    events = await events_of(Shipper(), resume_input(entry(tool_call_id="tc-1"), messages=messages), attested=True)
    assert events[-1]["result"] == {"approvers": ["ann"]}


def test_an_agent_that_knows_its_tool_call_binds_the_fingerprint_to_it():
    class Exact(Shipper):
        def tool_call_ids_for(self, run_input, interrupt_id):
            return ["tc-2"]

    call = {"id": "tc-1", "type": "function", "function": {"name": "ship", "arguments": "{}"}}
    body = resume_input(entry(tool_call_id="tc-1"), messages=[{"id": "m1", "role": "assistant", "toolCalls": [call]}])
    with pytest.raises(Exception, match="does not match") as refused:
        attested_approvals(RunAgentInput.model_validate(body), Exact().tool_call_ids_for)
    assert refused.value.code == "BAD_FINGERPRINT"


def test_approvals_are_frozen_records_of_each_decision():
    approvals = attested_approvals(RunAgentInput.model_validate(resume_input(entry())))
    assert approvals == {"ship": (Approval("ann", 7, "approve", "2026-01-02T03:04:05Z", "ok"),)}
    with pytest.raises(AttributeError):
        approvals["ship"][0].username = "mallory"


def test_a_decision_without_a_username_is_refused():
    body = resume_input(entry(decisions=[{"action": "approve"}]))
    with pytest.raises(Exception, match="no username") as refused:
        attested_approvals(RunAgentInput.model_validate(body))
    assert refused.value.code == "BAD_FINGERPRINT"


def test_check_signature_refuses_with_bad_signature():
    body = b'{"a":1}'
    now = int(time.time())
    assert check_signature(SECRET, signing.sign(SECRET, body, now), body) == now
    for header in (None, signing.sign("css_other", body, now), signing.sign(SECRET, body, now - 301)):
        with pytest.raises(BadSignature) as refused:
            check_signature(SECRET, header, body)
        assert refused.value.code == "BAD_SIGNATURE"


# --- the view: the raw body's signature, before the agent runs --------------


async def post(view, body: bytes, headers: dict | None = None) -> tuple[int, list[dict]]:
    request = AsyncRequestFactory().post("/agent/", data=body, content_type="application/json", headers=headers or {})
    response = await view(request)
    if not getattr(response, "streaming", False):
        return response.status_code, [json.loads(response.content)]
    raw = b"".join([chunk async for chunk in response.streaming_content]).decode()
    return response.status_code, [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]


def signed(body: bytes, secret=SECRET, at=None) -> dict:
    return {signing.SIGNATURE_HEADER: signing.sign(secret, body, int(time.time()) if at is None else at)}


FIRST = json.dumps({"threadId": "t", "runId": "r1", "messages": []}).encode()


async def test_a_signed_request_runs_and_its_attested_resume_names_the_approvers():
    agent = Shipper(signing_secret=SECRET)
    view = agent_view(agent)
    status, events = await post(view, FIRST, signed(FIRST))
    assert status == 200 and events[-1]["outcome"]["type"] == "interrupt"
    # Spaces and key order as a client might send them: the signature is over these bytes.
    resume = json.dumps(resume_input(entry()), indent=1).encode()
    status, events = await post(view, resume, signed(resume))
    assert events[-1]["result"] == {"approvers": ["ann"]}
    assert agent.ran == 2


# Headers made when the test runs, not when it is collected: a signature "400 s
# from now" made at collection would be within the tolerance minutes later.
@pytest.mark.parametrize("headers", [
    lambda: {},  # unsigned
    lambda: signed(FIRST, secret="css_forged"),
    lambda: signed(FIRST, at=int(time.time()) - 400),  # stale
    lambda: signed(FIRST, at=int(time.time()) + 400),  # from the future
    lambda: {signing.SIGNATURE_HEADER: "v1=deadbeef"},  # malformed
], ids=["unsigned", "forged", "stale", "future", "malformed"])
async def test_an_unsigned_forged_or_stale_request_is_a_run_error_before_the_agent_runs(headers):
    agent = Shipper(signing_secret=SECRET)
    status, events = await post(agent_view(agent), FIRST, headers())
    assert status == 200
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[0]["runId"] == "r1"
    assert events[-1]["code"] == "BAD_SIGNATURE"
    assert agent.ran == 0


async def test_a_signature_over_other_bytes_is_refused_even_if_the_json_is_equal():
    agent = Shipper(signing_secret=SECRET)
    spaced = json.dumps(json.loads(FIRST), indent=2).encode()
    status, events = await post(agent_view(agent), spaced, signed(FIRST))
    assert events[-1]["code"] == "BAD_SIGNATURE" and agent.ran == 0


async def test_a_bad_signature_on_a_body_that_does_not_parse_is_still_a_run_error():
    status, events = await post(agent_view(Shipper(signing_secret=SECRET)), b"{not json", {})
    assert [e["type"] for e in events] == ["RUN_ERROR"] and events[0]["code"] == "BAD_SIGNATURE"


async def test_an_agent_without_a_secret_ignores_the_header():
    agent = Shipper()
    status, events = await post(agent_view(agent), FIRST, signed(FIRST, secret="css_whatever"))
    assert events[-1]["outcome"]["type"] == "interrupt"


async def test_an_optional_signature_answers_unsigned_requests_unverified_but_refuses_forged_ones():
    agent = Shipper(signing_secret=SECRET, require_signature=False)
    view = agent_view(agent)
    resume = json.dumps(resume_input(entry())).encode()
    status, events = await post(view, resume)
    assert events[-1]["result"] == {"approvers": []}
    status, events = await post(view, resume, signed(resume, secret="css_forged"))
    assert events[-1]["code"] == "BAD_SIGNATURE"


# --- the demo agents: their own Agent row's secret --------------------------


@pytest.fixture
def deployer_view():
    from interrupts.demo.urls import urlpatterns

    return next(p.callback for p in urlpatterns if p.name == "demo-deployer")


def deploy_resume() -> bytes:
    return json.dumps(resume_input(entry(thread="d", interrupt_id="approve-deploy", payload={"build": 42}),
                                   thread="d")).encode()


@pytest.mark.django_db(transaction=True)
async def test_a_demo_agent_verifies_with_its_own_rows_secret_and_names_the_approver(deployer_view):
    from interrupts.models import Agent as AgentRow

    row = await AgentRow.objects.aget(name="deployer")
    body = deploy_resume()
    status, events = await post(deployer_view, body, signed(body, secret=row.signing_secret))
    assert "Deployed build 42, approved by ann." in [e.get("delta") for e in events], events
    # Rotated: the old secret no longer signs for it, at once.
    old = row.signing_secret
    new = await sync_to_async(row.rotate_signing_secret)()
    assert new != old
    status, events = await post(deployer_view, body, signed(body, secret=old))
    assert events[-1]["code"] == "BAD_SIGNATURE"


@pytest.mark.django_db(transaction=True)
async def test_a_demo_agent_answers_an_unsigned_request_unless_told_to_require_a_signature(deployer_view):
    body = deploy_resume()
    status, events = await post(deployer_view, body)
    assert "Deployed build 42." in [e.get("delta") for e in events]
    with override_settings(COUNTERSIGN_DEMO_REQUIRE_SIGNATURE=True):
        status, events = await post(deployer_view, body)
    assert events[-1]["code"] == "BAD_SIGNATURE"
