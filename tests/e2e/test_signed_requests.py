"""Every request Countersign sends an agent is signed over its exact bytes, and its answers attested.

``Recorder`` (tests/loopback.py's ShipRecorder) is a real HTTP agent: it
keeps each POST's raw body and headers, asks for one tool-bound approval,
and succeeds on resume.
The hub is `manage.py serve` (tests/e2e/conftest.py).
"""

from __future__ import annotations

import json
import time

import pytest
from ag_ui.core import RunAgentInput

from interrupts.protocol import signing, trail
from interrupts.sdk.verify import attested_approvals

from ..loopback import ShipRecorder
from .conftest import events, finished_run, pending, start, wait_for

Recorder = ShipRecorder


@pytest.fixture(scope="module")
def recorder():
    agent = Recorder().start()
    yield agent
    agent.stop()


@pytest.fixture(scope="module")
def registered(hub, recorder):
    """The recorder registered through the API, with its secret as the registration answered it."""
    with hub.api() as api:
        created = api.post("/api/agents/", json={"name": "x-recorder", "url": f"{recorder.url}/r/"})
        assert created.status_code == 201, created.text
        # The demo reviewer starts the run and approves it: this agent's operator allows that.
        policy = api.post("/api/policies/", json={"name": "x-recorder self-approval", "agent": "x-recorder",
                                                  "allow_self_approval": True})
        assert policy.status_code == 201, policy.text
    return created.json()["signing_secret"]


def header_of(headers: dict) -> str:
    return next(v for k, v in headers.items() if k.lower() == signing.SIGNATURE_HEADER.lower())


def test_the_first_run_and_its_resume_are_signed_over_the_bytes_sent(api, recorder, registered):
    run = start(api, "x-recorder", "ship it")
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    assert (
        api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "approve", "comment": "go"}).status_code
        == 201
    )
    wait_for(lambda: len(recorder.requests) >= 2)

    (first_raw, first_headers, _), (resume_raw, resume_headers, _) = recorder.requests[-2:]
    for raw, headers in ((first_raw, first_headers), (resume_raw, resume_headers)):
        assert headers["Content-Type"] == "application/json"
        stamped = signing.verify(registered, header_of(headers), raw, time.time())
        assert abs(stamped - time.time()) < 60
        # Another secret, or a byte changed, and the same header fails.
        with pytest.raises(signing.SignatureError):
            signing.verify("css_other", header_of(headers), raw, time.time())
        with pytest.raises(signing.SignatureError):
            signing.verify(registered, header_of(headers), raw.replace(b"}", b" }", 1), time.time())

    resume = RunAgentInput.model_validate(json.loads(resume_raw))
    assert resume.parent_run_id == run["run_id"]
    # The answer's fingerprint names exactly this tool call, and the approver is the reviewer.
    approvals = attested_approvals(resume, lambda run_input, interrupt_id: ["tc-ship"])
    [approval] = approvals["approve-ship"]
    assert (approval.username, approval.action, approval.comment) == ("reviewer", "approve", "go")


def test_the_exported_trail_holds_each_resume_as_sent_and_checks_its_signature_offline(api, recorder):
    # An agent of its own: no other test rotates its secret.
    created = api.post("/api/agents/", json={"name": "x-kept", "url": f"{recorder.url}/r/"})
    assert created.status_code == 201, created.text
    secret = created.json()["signing_secret"]
    assert api.post("/api/policies/", json={"name": "x-kept self-approval", "agent": "x-kept",
                                            "allow_self_approval": True}).status_code == 201
    run = start(api, "x-kept", "ship it, and keep it on record")
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    count = len(recorder.requests)
    assert api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "approve"}).status_code == 201
    wait_for(lambda: len(recorder.requests) > count)
    raw, headers, _ = recorder.requests[count]
    resume_id = json.loads(raw)["runId"]
    exported = api.get("/api/audit/export/")
    assert exported.status_code == 200
    [sent] = [json.loads(e["content"])["data"] for e in json.loads(exported.content)["entries"]
              if e["kind"] == trail.RESUME_SENT and json.loads(e["content"])["data"]["runId"] == resume_id]
    # The very bytes the agent got, and the signature it checked them with.
    assert (sent["body"].encode(), sent["signature"], sent["agent"]) == (raw, header_of(headers), "x-kept")
    # Offline, with this agent's secret (other agents' resumes, whose secrets are not given, left unchecked):
    # every resume's answers are decisions the trail took before it, and this agent's are signed.
    checked = trail.check_export(exported.content, {"x-kept": ["css_an_older_one", secret]})
    assert checked.ok, checked.problems
    assert checked.signatures == 1 and "x-kept" not in checked.unchecked
    wrong = trail.check_export(exported.content, {"x-kept": ["css_not_it"]})
    assert any("signature does not verify with the secret given for agent 'x-kept'" in p for p in wrong.problems)
    # An answer the resume sends that no decision took is named, even in a chain rebuilt to hold it.
    forged = json.loads(raw)
    forged["resume"][0]["payload"] = {"approved": True, "args": {"to": "attacker"}}
    rebuilt = _rebuilt(exported.content, resume_id, json.dumps(forged, separators=(",", ":")))
    assert any("an answer no decision before it took" in p for p in trail.check_export(rebuilt).problems)


def _rebuilt(export: bytes, run_id: str, body: str) -> bytes:
    """``export`` with ``run_id``'s resume body replaced, every hash after it recomputed: a consistent forgery."""
    document = json.loads(export)
    prev = trail.GENESIS
    for entry in document["entries"]:
        content = json.loads(entry["content"])
        if entry["kind"] == trail.RESUME_SENT and content["data"]["runId"] == run_id:
            content["data"]["body"] = body
            entry["content"] = trail.canonical(content).decode()
        entry["prevHash"], entry["hash"] = prev, trail.entry_hash(prev, entry["content"])
        prev = entry["hash"]
    document["head"]["hash"] = prev
    return trail.canonical(document)


def test_a_rotated_secret_signs_the_next_request(hub, api, recorder, registered):
    rotated = api.post("/api/agents/x-recorder/rotate-secret/")
    assert rotated.status_code == 200
    secret = rotated.json()["signing_secret"]
    count = len(recorder.requests)
    run = start(api, "x-recorder", "again")
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    raw, headers, _ = recorder.requests[count]
    signing.verify(secret, header_of(headers), raw, time.time())
    with pytest.raises(signing.SignatureError):
        signing.verify(registered, header_of(headers), raw, time.time())
    api.post(f"/api/runs/{run['run_id']}/cancel/")


def test_a_demo_agent_verifies_the_hubs_signature_and_names_the_verified_approver(api):
    run = start(api, "deployer")
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    assert (
        api.post(
            f"/api/interrupts/{asked['id']}/decide/", json={"action": "respond", "payload": {"build": 42}}
        ).status_code
        == 201
    )

    def said():
        return [e["payload"].get("delta") for e in events(api, run["thread"]) if e["type"] == "TEXT_MESSAGE_CONTENT"]

    detail = wait_for(lambda: (d := api.get(f"/api/interrupts/{asked['id']}/").json())["resumed_by"] and d)
    assert finished_run(api, detail["resumed_by"])["status"] == "succeeded"
    assert "Deployed build 42, approved by reviewer." in said()
