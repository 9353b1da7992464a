"""The hub against Microsoft Agent Framework's own AG-UI adapter (agent-framework-ag-ui 1.7.0, core 1.23.0).

The agent runs in its own process and venv (tests/external/agent_framework_agent.py:
a scripted chat client, no LLM) with one tool that needs approval,
``issue_refund(order, amount)`` with ``approval_mode="always_require"``,
registered as ``maf-refund``. Agent Framework pauses with the 1.0 interrupt
outcome, and also sends a CUSTOM ``function_approval_request``, a synthetic
``confirm_changes`` tool call that nobody answers, and a MESSAGES_SNAPSHOT; it
speaks ag-ui-protocol 0.1.22 (no ``protocolVersion``). Approved, edited and
rejected through the hub's API and through the gateway; the tool must run with
exactly the approved args, or not at all, and the run finish.
"""

import uuid

import httpx
import pytest

from ..servers import free_port
from .agui_client import AguiClient
from .conftest import decide, events, external_agent, finished_run, peer_python, pending, resumed, start, wait_for


@pytest.fixture(scope="module")
def agent_framework(tmp_path_factory, hub):
    """The Agent Framework agent in its own process, registered with the hub as maf-refund."""
    port = free_port()
    with external_agent([peer_python("agent_framework"), "tests/external/agent_framework_agent.py", "--port", port],
                        tmp_path_factory.mktemp("agent_framework"), timeout=60):
        url = f"http://127.0.0.1:{port}"
        with hub.api() as api:
            response = api.post("/api/agents/", json={"name": "maf-refund", "url": f"{url}/refund/"})
            assert response.status_code == 201, response.text
        yield url


def executed(url: str, order: str) -> list[dict]:
    """The tool's executions for ``order``, as the agent recorded them."""
    return [e for e in httpx.get(f"{url}/executed", timeout=10).json()["executed"] if e["order"] == order]


def said(api, thread: str, run_id: str) -> str:
    return "".join(e["payload"]["delta"] for e in events(api, thread)
                   if e["run"] == run_id and e["type"] == "TEXT_MESSAGE_CONTENT")


def new_order() -> str:
    return f"MAF-{uuid.uuid4().hex[:10]}"


def paused(api, order: str):
    """A new thread whose first run asked to refund ``order``: (the run, its one interrupt)."""
    run = start(api, "maf-refund", message=order)
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    assert asked["reason"] == "tool_call"
    # The card shows the real call, not the synthetic confirm_changes beside it.
    assert asked["tool_name"] == "issue_refund"
    assert asked["proposed_args"] == {"order": order, "amount": 42}
    assert asked["supports_edits"] is True
    return run, asked


def succeeded(done: dict) -> None:
    assert done["status"] == "succeeded", (done["status"], done.get("error_code"), done.get("error_message"))


# --- Through the hub ---------------------------------------------------------------


def test_approve(api, agent_framework):
    order = new_order()
    run, asked = paused(api, order)
    assert executed(agent_framework, order) == []  # nothing runs before the decision
    decide(api, asked, action="approve")
    done = resumed(api, asked)
    succeeded(done)
    assert executed(agent_framework, order) == [{"order": order, "amount": 42}]
    assert said(api, run["thread"], done["run_id"]) == f"Done: refunded 42 EUR on {order}."


def test_edit(api, agent_framework):
    order, edited = new_order(), new_order()
    run, asked = paused(api, order)
    decide(api, asked, action="edit", edited_args={"order": edited, "amount": 7})
    done = resumed(api, asked)
    succeeded(done)
    assert executed(agent_framework, order) == []
    assert executed(agent_framework, edited) == [{"order": edited, "amount": 7}]
    assert said(api, run["thread"], done["run_id"]) == f"Done: refunded 7 EUR on {edited}."


def test_reject(api, agent_framework):
    order = new_order()
    run, asked = paused(api, order)
    decide(api, asked, action="reject")
    done = resumed(api, asked)
    succeeded(done)
    assert executed(agent_framework, order) == []
    assert said(api, run["thread"], done["run_id"]).startswith("Not refunded: ")


# --- Through the gateway, as an AG-UI client that keeps its own history -------------


async def paused_through_the_gateway(hub, order: str) -> AguiClient:
    agent = AguiClient(f"{hub.url}/agui/maf-refund/", {"Authorization": f"Token {hub.token}"},
                       f"maf-gw-{uuid.uuid4().hex[:10]}")
    agent.say(order)
    first = await agent.run()
    assert first.problems(severities=("error",)) == []
    [asked] = agent.pending
    [call] = [c for m in agent.messages if m["role"] == "assistant" for c in m.get("toolCalls") or []
              if c["id"] == asked["toolCallId"]]
    assert call["function"]["name"] == "issue_refund"
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


async def test_through_the_gateway_approve(hub, agent_framework):
    order = new_order()
    agent = await paused_through_the_gateway(hub, order)
    done = await resume_through_the_gateway(agent, {"approved": True})
    assert executed(agent_framework, order) == [{"order": order, "amount": 42}]
    assert done.said() == [f"Done: refunded 42 EUR on {order}."]


async def test_through_the_gateway_edit(hub, agent_framework):
    order, edited = new_order(), new_order()
    agent = await paused_through_the_gateway(hub, order)
    done = await resume_through_the_gateway(agent, {"approved": True, "editedArgs": {"order": edited, "amount": 3}})
    assert executed(agent_framework, order) == []
    assert executed(agent_framework, edited) == [{"order": edited, "amount": 3}]
    assert done.said() == [f"Done: refunded 3 EUR on {edited}."]


async def test_through_the_gateway_reject(hub, agent_framework):
    order = new_order()
    agent = await paused_through_the_gateway(hub, order)
    done = await resume_through_the_gateway(agent, {"approved": False})
    assert executed(agent_framework, order) == []
    [text] = done.said()
    assert text.startswith("Not refunded: ")
