"""The hub against an external TanStack AI agent: @tanstack/ai's chat() served over AG-UI SSE.

The agent runs in its own node process (tests/external/tanstack/agent.mjs, a
fake model, no LLM) and keeps nothing between runs: it raises TanStack's own
generic interrupts and takes a resume only when each entry carries the
``tanstack:interruptContinuation`` rebuilt from the interrupt's binding, on
the run named by ``parentRunId``. Answered through the API and through the
gateway, whose every stream ag-ui-validate reads.
"""

import copy
import json
import shutil
import subprocess

import httpx
import pytest

from interrupts.protocol import dialects

from ..agui import post_run, resume_body
from ..servers import ROOT, free_port, stop_process
from .agui_client import held_after
from .conftest import events, finished_run, pending, run_of, start, wait_for

# What a framework sends, and how the hub reads it, is the same whatever stores it: `make test` runs
# it on SQLite; the PostgreSQL pass leaves it out (``backend_free``) and runs the hub's own end to end.
pytestmark = pytest.mark.backend_free

PEER = ROOT / "tests" / "external" / "tanstack"
CONTINUATION = "tanstack:interruptContinuation"


@pytest.fixture(scope="session")
def tanstack(tmp_path_factory, hub):
    """The TanStack agent in its own node process, registered with the hub as ts-<path>."""
    node = shutil.which("node")
    if node is None or not (PEER / "node_modules" / "@tanstack" / "ai").is_dir():
        pytest.fail(f"node or {PEER}/node_modules is missing: `make test` installs it (npm ci) from package-lock.json")
    log = tmp_path_factory.mktemp("tanstack") / "agent.log"
    with open(log, "w") as out:
        process = subprocess.Popen([node, str(PEER / "agent.mjs"), str(free_port())], cwd=ROOT, stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "ready on" in log.read_text() or process.poll() is not None, timeout=30)
        assert process.poll() is None, log.read_text()
        url = log.read_text().split("ready on ", 1)[1].split()[0]
        with hub.api() as api:
            for path in ("review", "pair", "refuse-once", "refuse-early"):
                response = api.post("/api/agents/", json={"name": f"ts-{path}", "url": f"{url}/{path}/"})
                assert response.status_code == 201, response.text
        yield url
    finally:
        stop_process(process)


@pytest.fixture
def ts_api(api, tanstack):
    return api


def tanstack_continuations(url: str, interrupts: list[dict]) -> list[dict | None]:
    """The continuation TanStack's own client code builds for each interrupt (the peer runs it)."""
    response = httpx.post(f"{url}/_continuation/", json={"interrupts": interrupts}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["continuations"]


def decide(api, interrupt, **body):
    response = api.post(f"/api/interrupts/{interrupt['id']}/decide/", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def resumed(api, interrupt, thread):
    detail = wait_for(lambda: (d := api.get(f"/api/interrupts/{interrupt['id']}/").json())["resumed_by"] and d)
    return finished_run(api, detail["resumed_by"], thread)


def said(api, thread, run_id):
    """What the agent's (fake) model answered in that run: it names how each interrupt was answered."""
    return "".join(e["payload"]["delta"] for e in events(api, thread)
                   if e["run"] == run_id and e["type"] == "TEXT_MESSAGE_CONTENT")


def paused(api, agent, count=1):
    run = start(api, agent)
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    asked = wait_for(lambda: len(found := pending(api, run["thread"])) == count and found)
    return run, asked


def raw_interrupts(api, run):
    return run_of(api, run["run_id"])["outcome"]["interrupts"]


def test_the_interrupt_is_recorded_with_its_tanstack_binding(ts_api):
    run, [asked] = paused(ts_api, "ts-review")
    assert (asked["reason"], asked["message"]) == ("review-required", "Refund 42 EUR on order A-1001?")
    assert asked["response_schema"]["required"] == ["approved"]
    [raw] = raw_interrupts(ts_api, run)
    binding = raw["metadata"]["tanstack:interruptBinding"]
    assert binding["kind"] == "generic" and binding["interruptedRunId"] == run["run_id"]
    assert raw["metadata"]["tanstack:interruptPayload"] == {"order": "A-1001", "amount": 42, "currency": "EUR"}


def test_approve(ts_api, tanstack):
    run, [asked] = paused(ts_api, "ts-review")
    decide(ts_api, asked, action="approve")
    done = resumed(ts_api, asked, run["thread"])
    assert done["status"] == "succeeded", done
    assert said(ts_api, run["thread"], done["run_id"]) == "Resumed: review-refund=approved."
    # What TanStack took: its own continuation, beside Countersign's attestation, on the interrupted run.
    [entry] = done["input"]["resume"]
    [raw] = raw_interrupts(ts_api, run)
    assert [entry["metadata"][CONTINUATION]] == tanstack_continuations(tanstack, [raw])
    assert entry["metadata"]["countersign"]["decisions"]
    assert done["input"]["parentRunId"] == run["run_id"]


def test_an_answer_with_a_note(ts_api):
    run, [asked] = paused(ts_api, "ts-review")
    decide(ts_api, asked, action="respond", payload={"approved": False, "note": "too much"})
    done = resumed(ts_api, asked, run["thread"])
    assert said(ts_api, run["thread"], done["run_id"]) == "Resumed: review-refund=rejected (too much)."


def test_cancel(ts_api):
    run, [asked] = paused(ts_api, "ts-review")
    decide(ts_api, asked, action="cancel")
    done = resumed(ts_api, asked, run["thread"])
    assert done["status"] == "succeeded", done
    [entry] = done["input"]["resume"]
    # TanStack refuses a cancelled entry that carries a payload, even null.
    assert entry["status"] == "cancelled" and "payload" not in entry and CONTINUATION in entry["metadata"]
    assert said(ts_api, run["thread"], done["run_id"]) == "Resumed: review-refund=cancelled."


def test_two_interrupts_at_once(ts_api):
    run, both = paused(ts_api, "ts-pair", count=2)
    decide(ts_api, both[0], action="approve")
    assert pending(ts_api, run["thread"]) == [both[1]]
    decide(ts_api, both[1], action="cancel")
    done = resumed(ts_api, both[1], run["thread"])
    assert done["status"] == "succeeded", done
    entries = done["input"]["resume"]
    assert [(e["status"], e["metadata"][CONTINUATION]["definitionId"], e["metadata"][CONTINUATION]["batchIndex"])
            for e in entries] == [("resolved", "confirm-email", 0), ("cancelled", "confirm-invoice", 1)]
    assert said(ts_api, run["thread"], done["run_id"]) == "Resumed: confirm-email=approved, confirm-invoice=cancelled."


# refuse-once: the model fails the resume (after RUN_STARTED); refuse-early: the
# resume is refused before it starts, as TanStack refuses one it cannot match.
@pytest.mark.parametrize("agent", ["ts-refuse-once", "ts-refuse-early"])
def test_a_refused_answer_reopened_is_answered_again(ts_api, agent):
    run, [asked] = paused(ts_api, agent)
    thread = run["thread"]
    decide(ts_api, asked, action="approve", comment="first")
    refused = resumed(ts_api, asked, thread)
    assert refused["status"] == "failed" and refused["refused"] is True, refused
    assert refused["error_code"] == "peer-refused"
    response = ts_api.post(f"/api/runs/{refused['run_id']}/reopen/")
    assert response.status_code == 200 and response.json()["settlement"] == "reopened", response.text
    assert [i["id"] for i in pending(ts_api, thread)] == [asked["id"]]
    decide(ts_api, asked, action="respond", payload={"approved": True, "note": "second look"}, comment="again")
    again = resumed(ts_api, asked, thread)
    assert again["run_id"] != refused["run_id"] and again["status"] == "succeeded", again
    # The same interrupted run, the same continuation: TanStack rebuilds the batch afresh each time.
    assert again["input"]["parentRunId"] == refused["input"]["parentRunId"] == run["run_id"]
    assert (
        again["input"]["resume"][0]["metadata"][CONTINUATION] == refused["input"]["resume"][0]["metadata"][CONTINUATION]
    )
    assert said(ts_api, thread, again["run_id"]) == "Resumed: review-refund=approved (second look)."


# --- Through the gateway ----------------------------------------------------------


def gateway(hub, agent):
    return f"{hub.url}/agui/{agent}/", {"Authorization": f"Token {hub.token}"}


def first_input(thread):
    return {"threadId": thread, "runId": "r1", "messages": [], "state": {}, "tools": [], "context": [],
            "forwardedProps": {}}


def answer(first, thread, run_id, resume):
    """The resume as TanStack's client sends it: a whole RunAgentInput (chat() refuses one without tools)."""
    return {**resume_body(first, thread, run_id, resume), "tools": [], "context": [], "forwardedProps": {}}


async def test_through_the_gateway_an_answer_without_a_continuation_resumes_tanstack(hub, tanstack):
    url, headers = gateway(hub, "ts-review")
    first = await post_run(url, first_input("ts-gw-1"), headers)
    assert first.problems() == []
    [asked] = first.interrupts
    # A plain AG-UI client's answer: the hub adds what TanStack needs.
    resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True}}]
    second = await post_run(url, answer(first, "ts-gw-1", "r2", resume), headers)
    assert second.problems() == []
    assert second.said() == ["Resumed: review-refund=approved."]
    assert second.last["type"] == "RUN_FINISHED"


async def test_through_the_gateway_two_interrupts_at_once(hub, tanstack):
    url, headers = gateway(hub, "ts-pair")
    first = await post_run(url, first_input("ts-gw-2"), headers)
    assert first.problems() == [] and len(first.interrupts) == 2
    resume = [{"interruptId": first.interrupts[0]["id"], "status": "cancelled"},
              {"interruptId": first.interrupts[1]["id"], "status": "resolved", "payload": {"approved": True}}]
    second = await post_run(url, answer(first, "ts-gw-2", "r2", resume), headers)
    assert second.problems() == []
    assert second.said() == ["Resumed: confirm-email=cancelled, confirm-invoice=approved."]


async def test_through_the_gateway_a_refused_answer_reopened(hub, tanstack):
    url, headers = gateway(hub, "ts-refuse-once")
    first = await post_run(url, first_input("ts-gw-3"), headers)
    [asked] = first.interrupts
    resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True}}]
    refused = await post_run(url, answer(first, "ts-gw-3", "r2", resume), headers)
    assert refused.problems() == []
    assert refused.last["type"] == "RUN_ERROR" and refused.last.get("code") == "peer-refused"
    with hub.api() as api:
        response = api.post("/api/runs/r2/reopen/", params={"thread": "ts-gw-3"})
        assert response.status_code == 200 and response.json()["settlement"] == "reopened", response.text
    again = await post_run(url, answer(first, "ts-gw-3", "r3", resume), headers)
    assert again.problems() == []
    assert again.said() == ["Resumed: review-refund=approved."]


# --- The continuation is TanStack's own -------------------------------------------


def variants(raw: dict) -> list[dict]:
    """``raw`` and the bindings an agent could send instead, each as TanStack's client reads it."""
    def changed(**fields):
        interrupt = copy.deepcopy(raw)
        binding = interrupt["metadata"]["tanstack:interruptBinding"]
        for name, value in fields.items():
            if value is ...:
                binding.pop(name, None)
            else:
                binding[name] = value
        return interrupt

    bare = copy.deepcopy(raw)
    bare["metadata"].pop("tanstack:interruptPayload", None)
    nothing = copy.deepcopy(raw)
    nothing["metadata"]["tanstack:interruptPayload"] = None
    bare.pop("message", None)
    bare["expiresAt"] = "2026-12-01T16:00:00.000Z"
    return [raw, bare, nothing, {k: v for k, v in raw.items() if k != "metadata"},
            changed(interruptId="another"), changed(v=2), changed(v=...), changed(kind="tool-approval"),
            changed(batchIndex=-1), changed(batchIndex=1.5), changed(batchIndex="0"), changed(batchIndex=True),
            changed(batchIndex=2.0), changed(definitionId=""), changed(key=...), changed(payloadSchemaHash=7),
            changed(responseSchemaHash=""), changed(responseSchemaHash=...), changed(expiresAt="not a date"),
            changed(extra={"x": 1})]


def test_the_continuation_is_the_one_tanstack_s_client_builds(ts_api, tanstack):
    review, _asked = paused(ts_api, "ts-review")
    pair, _asked = paused(ts_api, "ts-pair", count=2)
    interrupts = [v for raw in raw_interrupts(ts_api, review) + raw_interrupts(ts_api, pair) for v in variants(raw)]
    theirs = tanstack_continuations(tanstack, interrupts)
    # Kept, per interrupt: as raised, bare, a null payload, no v, index 2.0, a hash that is no string or absent, extra.
    assert sum(c is not None for c in theirs) == 3 * 8
    for interrupt, expected in zip(interrupts, theirs, strict=True):
        ours = dialects.entry_metadata(interrupt, "resolved", {"approved": True}).get(CONTINUATION)
        assert ours == expected, json.dumps(interrupt)


# --- Through the gateway, as TanStack's own client resumes -----------------------------


def as_tanstack_client(tanstack_url, first, entries):
    """Each entry with the continuation TanStack's client puts on it, from the interrupt as the client got it."""
    continuations = tanstack_continuations(tanstack_url, first.interrupts)
    return [{**entry, "metadata": {CONTINUATION: continuation}}
            for entry, continuation in zip(entries, continuations, strict=True)]


ASKED = [{"id": "m-ask", "role": "user", "content": "Refund order A-1001"}]


async def test_through_the_gateway_tanstack_s_own_client_resume_is_taken(hub, tanstack, ts_api):
    url, headers = gateway(hub, "ts-review")
    first = await post_run(url, {**first_input("ts-gw-own"), "messages": ASKED}, headers)
    [asked] = first.interrupts
    entries = as_tanstack_client(tanstack, first, [
        {"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True}}])
    body = {**answer(first, "ts-gw-own", "r2", entries), "messages": held_after(ASKED, first)}
    second = await post_run(url, body, headers)
    assert second.problems() == []
    assert second.said() == ["Resumed: review-refund=approved."]
    # The agent got the continuation once, as Countersign writes it, beside the attestation.
    [sent] = finished_run(ts_api, "r2", "ts-gw-own")["input"]["resume"]
    assert sent["metadata"][CONTINUATION] == entries[0]["metadata"][CONTINUATION]
    assert sent["metadata"]["countersign"]["decisions"]


async def test_through_the_gateway_tanstack_s_own_client_answers_two_at_once(hub, tanstack):
    url, headers = gateway(hub, "ts-pair")
    first = await post_run(url, {**first_input("ts-gw-own-2"), "messages": ASKED}, headers)
    entries = as_tanstack_client(tanstack, first, [
        {"interruptId": first.interrupts[0]["id"], "status": "resolved", "payload": {"approved": True}},
        {"interruptId": first.interrupts[1]["id"], "status": "cancelled"}])
    body = {**answer(first, "ts-gw-own-2", "r2", entries), "messages": held_after(ASKED, first)}
    second = await post_run(url, body, headers)
    assert second.problems() == []
    assert second.said() == ["Resumed: confirm-email=approved, confirm-invoice=cancelled."]


async def test_through_the_gateway_a_continuation_other_than_the_interrupt_s_is_refused(hub, tanstack, ts_api):
    url, headers = gateway(hub, "ts-review")
    first = await post_run(url, first_input("ts-gw-forged"), headers)
    [asked] = first.interrupts
    honest = as_tanstack_client(tanstack, first, [
        {"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True}}])
    forged = copy.deepcopy(honest)
    forged[0]["metadata"][CONTINUATION]["payload"]["amount"] = 4200
    refused = await post_run(url, answer(first, "ts-gw-forged", "r2", forged), headers)
    assert refused.problems() == []
    assert refused.types == ["RUN_STARTED", "RUN_ERROR"]
    assert refused.last["code"] == "RESERVED_METADATA_DIFFERS"
    assert "(payload.amount is different)" in refused.last["message"]
    assert len(pending(ts_api, "ts-gw-forged")) == 1  # nothing recorded
    again = await post_run(url, answer(first, "ts-gw-forged", "r3", honest), headers)
    assert again.said() == ["Resumed: review-refund=approved."]
