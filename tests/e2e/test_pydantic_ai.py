"""The hub against Pydantic AI's own AG-UI adapter (pydantic-ai-slim[ag-ui] 2.68.0).

The agent runs in its own process and venv (tests/external/pydantic_ai_agent.py:
a scripted FunctionModel, no LLM) with one tool that needs approval,
``issue_refund(order, amount)``. Two ways of keeping the conversation, each
registered as an agent: ``pai-client``, where the client holds the history
(a resume must send the assistant turn with the tool call, which Pydantic AI
streams as events and never as a MESSAGES_SNAPSHOT), and ``pai-store``, where
Pydantic AI keeps it in its InMemoryConversationStore. Each is approved,
edited and rejected through the hub's API and through the gateway; the tool
must run with exactly the approved args, or not at all, and the run finish.
"""

import uuid

import httpx
import pytest

from ..servers import free_port
from .agui_client import AguiClient
from .conftest import decide, events, external_agent, finished_run, peer_python, pending, resumed, start, wait_for

VARIANTS = ["client", "store"]


@pytest.fixture(scope="module")
def pydantic_ai(tmp_path_factory, hub):
    """The Pydantic AI agent in its own process, registered with the hub as pai-client and pai-store."""
    port = free_port()
    with external_agent([peer_python("pydantic_ai"), "tests/external/pydantic_ai_agent.py", "--port", port],
                        tmp_path_factory.mktemp("pydantic_ai"), timeout=60):
        url = f"http://127.0.0.1:{port}"
        with hub.api() as api:
            for variant in VARIANTS:
                response = api.post("/api/agents/", json={"name": f"pai-{variant}", "url": f"{url}/{variant}/"})
                assert response.status_code == 201, response.text
        yield url


def executed(url: str, order: str) -> list[dict]:
    """The tool's executions for ``order``, as the agent recorded them."""
    return [e for e in httpx.get(f"{url}/executed", timeout=10).json()["executed"] if e["order"] == order]


def said(api, thread: str, run_id: str) -> str:
    return "".join(e["payload"]["delta"] for e in events(api, thread)
                   if e["run"] == run_id and e["type"] == "TEXT_MESSAGE_CONTENT")


def new_order() -> str:
    return f"PAI-{uuid.uuid4().hex[:10]}"


def paused(api, variant: str, order: str):
    """A new thread whose first run asked to refund ``order``: (the run, its one interrupt)."""
    run = start(api, f"pai-{variant}", message=order)
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    assert asked["reason"] == "tool_call" and asked["interrupt_id"] == f"int-{asked['tool_call_id']}"
    # Streamed as TOOL_CALL_START/ARGS/END, never in a snapshot: the card still shows the call.
    assert asked["tool_name"] == "issue_refund"
    assert asked["proposed_args"] == {"order": order, "amount": 42}
    assert asked["supports_edits"] is True
    return run, asked


def succeeded(done: dict) -> None:
    assert done["status"] == "succeeded", (done["status"], done.get("error_code"), done.get("error_message"))


# --- Through the hub ---------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_approve(api, pydantic_ai, variant):
    order = new_order()
    run, asked = paused(api, variant, order)
    assert executed(pydantic_ai, order) == []  # nothing runs before the decision
    decide(api, asked, action="approve")
    done = resumed(api, asked)
    succeeded(done)
    assert executed(pydantic_ai, order) == [{"agent": variant, "thread": run["thread"], "order": order, "amount": 42}]
    assert said(api, run["thread"], done["run_id"]) == f"Done: refunded 42 EUR on {order}."


@pytest.mark.parametrize("variant", VARIANTS)
def test_edit(api, pydantic_ai, variant):
    order, edited = new_order(), new_order()
    run, asked = paused(api, variant, order)
    decide(api, asked, action="edit", edited_args={"order": edited, "amount": 7})
    done = resumed(api, asked)
    succeeded(done)
    assert executed(pydantic_ai, order) == []
    assert executed(pydantic_ai, edited) == [{"agent": variant, "thread": run["thread"], "order": edited, "amount": 7}]
    assert said(api, run["thread"], done["run_id"]) == f"Done: refunded 7 EUR on {edited}."


@pytest.mark.parametrize("variant", VARIANTS)
def test_reject(api, pydantic_ai, variant):
    order = new_order()
    run, asked = paused(api, variant, order)
    decide(api, asked, action="reject")
    done = resumed(api, asked)
    succeeded(done)
    assert executed(pydantic_ai, order) == []
    assert said(api, run["thread"], done["run_id"]).startswith("Not refunded: ")


# --- Through the gateway, as an AG-UI client that keeps its own history -------------


def client(hub, variant: str) -> AguiClient:
    return AguiClient(f"{hub.url}/agui/pai-{variant}/", {"Authorization": f"Token {hub.token}"},
                      f"pai-gw-{uuid.uuid4().hex[:10]}")


async def paused_through_the_gateway(hub, variant: str, order: str) -> AguiClient:
    agent = client(hub, variant)
    agent.say(order)
    first = await agent.run()
    assert first.problems(severities=("error",)) == []
    [asked] = agent.pending
    assert asked["toolCallId"] and asked["id"] == f"int-{asked['toolCallId']}"
    # What the client now holds, and sends back: the assistant turn with the call.
    [call] = [c for m in agent.messages if m["role"] == "assistant" for c in m.get("toolCalls") or []]
    assert call["id"] == asked["toolCallId"] and call["function"]["name"] == "issue_refund"
    return agent


async def resume_through_the_gateway(agent: AguiClient, payload: dict):
    [asked] = agent.pending
    done = await agent.run(resume=[{"interruptId": asked["id"], "status": "resolved", "payload": payload}])
    # ag-ui-validate reads one stream: the approved call's result answers a call of
    # the paused run, which the input's messages hold (1.0 allows it), and it calls that AGUI207.
    earlier = f"error AGUI207: TOOL_CALL_RESULT references toolCallId '{asked['toolCallId']}', which was never started"
    assert [p for p in done.problems(severities=("error",)) if p != earlier] == []
    assert done.last["type"] == "RUN_FINISHED", done.last
    assert agent.pending == []
    return done


@pytest.mark.parametrize("variant", VARIANTS)
async def test_through_the_gateway_approve(hub, pydantic_ai, variant):
    order = new_order()
    agent = await paused_through_the_gateway(hub, variant, order)
    done = await resume_through_the_gateway(agent, {"approved": True})
    assert executed(pydantic_ai, order) == [{"agent": variant, "thread": agent.thread, "order": order, "amount": 42}]
    assert done.said() == [f"Done: refunded 42 EUR on {order}."]


@pytest.mark.parametrize("variant", VARIANTS)
async def test_through_the_gateway_edit(hub, pydantic_ai, variant):
    order, edited = new_order(), new_order()
    agent = await paused_through_the_gateway(hub, variant, order)
    done = await resume_through_the_gateway(agent, {"approved": True, "editedArgs": {"order": edited, "amount": 3}})
    assert executed(pydantic_ai, order) == []
    assert executed(pydantic_ai, edited) == [{"agent": variant, "thread": agent.thread, "order": edited, "amount": 3}]
    assert done.said() == [f"Done: refunded 3 EUR on {edited}."]


@pytest.mark.parametrize("variant", VARIANTS)
async def test_through_the_gateway_reject(hub, pydantic_ai, variant):
    order = new_order()
    agent = await paused_through_the_gateway(hub, variant, order)
    done = await resume_through_the_gateway(agent, {"approved": False, "reason": "not this one"})
    assert executed(pydantic_ai, order) == []
    assert done.said() == ["Not refunded: not this one"]
