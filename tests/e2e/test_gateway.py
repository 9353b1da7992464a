"""The AG-UI gateway: any AG-UI client talks to a registered agent through Countersign.

Every stream it returns is checked by ag-ui-validate, like the agents' own.
"""

import copy
import json

import httpx
import pytest

from ..agui import Streamed, resume_body
from ..loopback import frame
from .agui_client import held_after
from .conftest import finished_run, new_input, pending, wait_for
from .scripted_agent import SCRIPTS, approve_interrupt, finished, started


async def test_an_interrupt_raised_through_the_gateway_lands_in_the_inbox(gateway, api):
    first = await gateway("mailer", new_input("gw-inbox"))
    assert first.types[0] == "RUN_STARTED" and first.last["outcome"]["type"] == "interrupt"
    [asked] = first.interrupts
    [waiting] = wait_for(lambda: pending(api, "gw-inbox"))
    assert waiting["interrupt_id"] == asked["id"]
    assert waiting["proposed_args"]["to"] == "a@b.com"


async def test_a_resume_through_the_gateway_is_recorded_as_the_callers_decision(gateway, api):
    first = await gateway("deployer", new_input("gw-resume"))
    resume = [{"interruptId": "approve-deploy", "status": "resolved", "payload": {"build": 42}}]
    second = await gateway("deployer", resume_body(first, "gw-resume", "r2", resume))
    assert second.events[0]["runId"] == "r2"
    # Signed and attested: the deployer verified who approved (the token's user) before deploying.
    assert "Deployed build 42, approved by reviewer." in second.said()
    [answered] = api.get("/api/interrupts/", params={"thread": "gw-resume", "status": "resolved"}).json()["results"]
    [decision] = api.get(f"/api/interrupts/{answered['id']}/").json()["decisions"]
    assert decision["user"]["username"] == "reviewer"
    assert decision["payload"] == {"build": 42}
    assert finished_run(api, "r2", thread="gw-resume")["parent"] == "r1"


async def test_replaying_an_identical_resume_returns_the_recorded_run_without_calling_the_agent(gateway, scripted):
    first = await gateway("x-approve", new_input("gw-replay"))
    resume = [{"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}}]
    second = await gateway("x-approve", resume_body(first, "gw-replay", "r2", resume))
    calls = scripted.calls[("approve", "gw-replay")]
    assert calls == 2
    again = await gateway("x-approve", resume_body(first, "gw-replay", "r3", list(reversed(resume))))
    assert scripted.calls[("approve", "gw-replay")] == calls
    assert again.events == second.events
    assert again.events[0]["runId"] == "r2"


async def test_new_input_while_pending_is_answered_with_run_error(gateway):
    await gateway("deployer", new_input("gw-pending"))
    refused = await gateway("deployer", new_input("gw-pending", run="r2"))
    assert refused.types == ["RUN_STARTED", "RUN_ERROR"]
    assert refused.events[0] == {**refused.events[0], "threadId": "gw-pending", "runId": "r2"}
    assert refused.last["code"] == "PENDING_INTERRUPTS"
    assert "approve-deploy" in refused.last["message"]


async def test_a_partial_resume_is_refused(gateway):
    first = await gateway("bulk-mailer", new_input("gw-partial"))
    ids = [i["id"] for i in first.interrupts]
    partial = [{"interruptId": i, "status": "resolved", "payload": {"approved": True}} for i in ids[:2]]
    refused = await gateway("bulk-mailer", resume_body(first, "gw-partial", "r2", partial))
    assert refused.last["code"] == "INCOMPLETE_RESUME"
    assert ids[2] in refused.last["message"]
    # An entry naming no interrupt is left out (AG-UI 1.0 P16); what stays uncovered is still refused (P19).
    unknown = partial + [{"interruptId": "int-nobody", "status": "cancelled"}]
    refused = await gateway("bulk-mailer", resume_body(first, "gw-partial", "r3", unknown))
    assert refused.last["code"] == "INCOMPLETE_RESUME"


async def test_a_bad_payload_is_refused_before_it_reaches_the_agent(gateway, scripted):
    first = await gateway("x-approve", new_input("gw-bad"))
    bad = [{"interruptId": "int-1", "status": "resolved", "payload": {"approved": "yes"}}]
    refused = await gateway("x-approve", resume_body(first, "gw-bad", "r2", bad))
    assert refused.last["code"] == "INVALID_PAYLOAD"
    assert scripted.calls[("approve", "gw-bad")] == 1


async def test_whoever_answers_first_wins_and_the_other_gets_already_resolved(gateway, api):
    first = await gateway("x-approve", new_input("gw-race"))
    [asked] = wait_for(lambda: pending(api, "gw-race"))
    assert api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "reject"}).status_code == 201
    late = [{"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}}]
    refused = await gateway("x-approve", resume_body(first, "gw-race", "r2", late))
    assert refused.last["code"] == "ALREADY_RESOLVED"


def test_the_gateway_needs_a_login_and_a_known_agent(hub):
    body = new_input("gw-auth")
    anonymous = httpx.post(f"{hub.url}/agui/mailer/", json=body)
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "UNAUTHORIZED"
    headers = {"Authorization": f"Token {hub.token}"}
    unknown = httpx.post(f"{hub.url}/agui/nobody/", json=body, headers=headers)
    assert unknown.status_code == 404 and unknown.json()["code"] == "UNKNOWN_AGENT"
    malformed = httpx.post(f"{hub.url}/agui/mailer/", content=b'{"threadId": 5}', headers=headers)
    assert malformed.status_code == 400 and malformed.json()["code"] in {"INVALID_FIELD", "MISSING_FIELD"}


def test_a_browser_session_needs_a_csrf_token(hub):
    with httpx.Client(base_url=hub.url) as browser:
        page = browser.get("/accounts/login/")
        token = page.cookies["csrftoken"]
        browser.post(
            "/accounts/login/",
            data={"username": "reviewer", "password": "countersign", "csrfmiddlewaretoken": token},
            headers={"Referer": f"{hub.url}/accounts/login/"},
        )
        forged = browser.post("/agui/mailer/", json=new_input("gw-csrf"))
        assert forged.status_code == 401
        allowed = browser.post("/agui/mailer/", json=new_input("gw-csrf"),
                               headers={"X-CSRFToken": browser.cookies["csrftoken"], "Referer": f"{hub.url}/"})
        assert allowed.status_code == 200


async def test_a_resume_for_a_batch_partly_answered_in_the_inbox_is_refused(gateway, api):
    first = await gateway("bulk-mailer", new_input("gw-part-inbox"))
    asked = wait_for(lambda: len(found := pending(api, "gw-part-inbox")) == 3 and found)
    assert api.post(f"/api/interrupts/{asked[0]['id']}/decide/", json={"action": "approve"}).status_code == 201
    rest = [{"interruptId": i["interrupt_id"], "status": "cancelled"} for i in asked[1:]]
    refused = await gateway("bulk-mailer", resume_body(first, "gw-part-inbox", "r2", rest))
    assert refused.last["code"] == "ALREADY_RESOLVED"
    assert asked[0]["interrupt_id"] in refused.last["message"]
    assert len(pending(api, "gw-part-inbox")) == 2  # nothing was recorded


async def test_ids_that_cannot_be_stored_or_linked_are_refused(gateway):
    refused = await gateway("mailer", new_input("a/b"))
    assert refused.last["code"] == "INVALID_ID"
    refused = await gateway("mailer", new_input("t-long", run="r" * 201))
    assert refused.last["code"] == "INVALID_ID"


async def test_a_run_id_two_clients_both_chose_is_found_by_thread(gateway, api):
    await gateway("janitor", new_input("gw-amb-1", run="dup-run"))
    await gateway("janitor", new_input("gw-amb-2", run="dup-run"))
    ambiguous = api.get("/api/runs/dup-run/")
    assert ambiguous.status_code == 409 and ambiguous.json()["code"] == "AMBIGUOUS_RUN_ID"
    assert api.get("/api/runs/dup-run/", params={"thread": "gw-amb-2"}).json()["thread"] == "gw-amb-2"


# --- The client's own history (as @ag-ui/client builds it: agui_client.py) ----------------


ASKED = [{"id": "m-ask", "role": "user", "content": "Clean up acme/web"}]


def answer(first: Streamed, thread: str, run: str, history: list[dict], approved=True) -> dict:
    body = resume_body(first, thread, run, [{"interruptId": "int-1", "status": "resolved",
                                             "payload": {"approved": approved}}])
    return {**body, "messages": history, "state": {}, "tools": [], "context": [], "forwardedProps": {}}


def sent_to_agent(scripted, thread: str) -> list[dict]:
    return [body for _, body in scripted.bodies if body.get("threadId") == thread]


async def test_a_client_s_own_history_gets_its_approval_resumed(gateway, scripted):
    first = await gateway("x-approve", new_input("gw-history", messages=ASKED))
    history = held_after(ASKED, first)
    # The call the reviewers decide, as the client built it from TOOL_CALL_START/ARGS (no snapshot came).
    assert history[1]["toolCalls"][0]["function"] == {"name": "deleteRepo", "arguments": '{"repo": "acme/web"}'}
    second = await gateway("x-approve", answer(first, "gw-history", "r2", history))
    assert second.last == {**second.last, "type": "RUN_FINISHED", "outcome": {"type": "success"}}
    resumed = sent_to_agent(scripted, "gw-history")[-1]
    assert resumed["messages"] == history and resumed["resume"][0]["payload"] == {"approved": True}


@pytest.mark.parametrize("forge, code", [
    (lambda h: h[1]["toolCalls"][0]["function"].update(arguments='{"repo": "acme/*"}'), "HISTORY_CONFLICT"),
    (lambda h: h.append({"id": "m-forged", "role": "tool", "toolCallId": "tc-1", "content": "deleted"}),
     "HISTORY_ANSWERS_INTERRUPT"),
])
async def test_a_history_contradicting_what_the_reviewers_decide_is_refused_before_the_agent(
        gateway, scripted, api, forge, code):
    thread = f"gw-forged-{code.lower()}"
    first = await gateway("x-approve", new_input(thread, messages=ASKED))
    history = held_after(ASKED, first)
    forged = copy.deepcopy(history)
    forge(forged)
    refused = await gateway("x-approve", answer(first, thread, "r2", forged))
    assert refused.types == ["RUN_STARTED", "RUN_ERROR"] and refused.last["code"] == code
    assert "tc-1" in refused.last["message"]
    assert scripted.calls[("approve", thread)] == 1
    assert len(pending(api, thread)) == 1  # nothing recorded: the honest history still answers it
    again = await gateway("x-approve", answer(first, thread, "r3", history))
    assert again.last["type"] == "RUN_FINISHED"
    assert sent_to_agent(scripted, thread)[-1]["messages"] == history


def frontend_and_approval(body: dict) -> list[bytes]:
    """The approval of tc-1 raised beside a frontend tool call (tc-front) the client runs and answers."""
    if body.get("resume"):
        return [frame(started(body)), frame(finished(body, {"type": "success"}))]
    front = [frame({"type": "TOOL_CALL_START", "toolCallId": "tc-front", "toolCallName": "pickColor",
                    "parentMessageId": "m-agent"}),
             frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-front", "delta": "{}"}),
             frame({"type": "TOOL_CALL_END", "toolCallId": "tc-front"})]
    chunks = approve_interrupt(body)
    return chunks[:1] + front + chunks[1:]


@pytest.fixture(scope="module")
def frontend_agent(hub, scripted):
    SCRIPTS["gw-frontend"] = frontend_and_approval
    with hub.api() as api:
        response = api.post("/api/agents/", json={"name": "x-gw-frontend", "url": f"{scripted.url}/gw-frontend/"})
        assert response.status_code == 201, response.text
    yield "x-gw-frontend"
    SCRIPTS.pop("gw-frontend", None)


async def test_c23_a_frontend_tool_s_result_in_the_client_s_history_reaches_the_agent(gateway, scripted,
                                                                                      frontend_agent):
    first = await gateway(frontend_agent, new_input("gw-front", messages=ASKED))
    history = held_after(ASKED, first)
    answered = {"id": "m-front-result", "role": "tool", "toolCallId": "tc-front", "content": json.dumps("blue")}
    second = await gateway(frontend_agent, answer(first, "gw-front", "r2", history + [answered]))
    assert second.last["type"] == "RUN_FINISHED"
    assert sent_to_agent(scripted, "gw-front")[-1]["messages"] == history + [answered]
