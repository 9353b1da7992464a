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

import pytest

from . import refund_peers
from .refund_peers import decided, executed, new_order, said, served

# What a framework sends, and how the hub reads it, is the same whatever stores it: `make test` runs
# it on SQLite; the PostgreSQL pass leaves it out (``backend_free``) and runs the hub's own end to end.
pytestmark = pytest.mark.backend_free

VARIANTS = ["client", "store"]


@pytest.fixture(scope="module")
def pydantic_ai(tmp_path_factory, hub):
    """The Pydantic AI agent in its own process, registered with the hub as pai-client and pai-store."""
    with served("pydantic_ai", hub, tmp_path_factory.mktemp("pydantic_ai"), warm=False, timeout=60,
                agents={f"pai-{variant}": f"/{variant}/" for variant in VARIANTS}) as url:
        yield url


def paused(api, variant: str, order: str):
    """A new thread whose first run asked to refund ``order``: (the run, its one interrupt)."""
    run, asked = refund_peers.paused(api, f"pai-{variant}", order)
    assert asked["reason"] == "tool_call" and asked["interrupt_id"] == f"int-{asked['tool_call_id']}"
    # Streamed as TOOL_CALL_START/ARGS/END, never in a snapshot: the card still shows the call.
    assert asked["tool_name"] == "issue_refund"
    assert asked["proposed_args"] == {"order": order, "amount": 42}
    assert asked["supports_edits"] is True
    return run, asked


# --- Through the hub ---------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_approve(api, pydantic_ai, variant):
    order = new_order("PAI")
    run, asked = paused(api, variant, order)
    assert executed(pydantic_ai, order) == []  # nothing runs before the decision
    done = decided(api, asked, action="approve")
    assert executed(pydantic_ai, order) == [{"agent": variant, "thread": run["thread"], "order": order, "amount": 42}]
    assert "".join(said(api, run["thread"], done["run_id"])) == f"Done: refunded 42 EUR on {order}."


@pytest.mark.parametrize("variant", VARIANTS)
def test_edit(api, pydantic_ai, variant):
    order, edited = new_order("PAI"), new_order("PAI")
    run, asked = paused(api, variant, order)
    done = decided(api, asked, action="edit", edited_args={"order": edited, "amount": 7})
    assert executed(pydantic_ai, order) == []
    assert executed(pydantic_ai, edited) == [{"agent": variant, "thread": run["thread"], "order": edited, "amount": 7}]
    assert "".join(said(api, run["thread"], done["run_id"])) == f"Done: refunded 7 EUR on {edited}."


@pytest.mark.parametrize("variant", VARIANTS)
def test_reject(api, pydantic_ai, variant):
    order = new_order("PAI")
    run, asked = paused(api, variant, order)
    done = decided(api, asked, action="reject")
    assert executed(pydantic_ai, order) == []
    assert "".join(said(api, run["thread"], done["run_id"])).startswith("Not refunded: ")


# --- Through the gateway, as an AG-UI client that keeps its own history -------------


async def paused_through_the_gateway(hub, variant: str, order: str):
    agent = await refund_peers.paused_through_the_gateway(hub, f"pai-{variant}", order)
    [asked] = agent.pending
    assert asked["toolCallId"] and asked["id"] == f"int-{asked['toolCallId']}"
    # What the client now holds, and sends back: the assistant turn with the call.
    [call] = [c for m in agent.messages if m["role"] == "assistant" for c in m.get("toolCalls") or []]
    assert call["id"] == asked["toolCallId"] and call["function"]["name"] == "issue_refund"
    return agent


async def resume_through_the_gateway(agent, payload: dict):
    # The only result from the paused run this one may stream: the approved call's.
    [asked] = agent.pending
    return await refund_peers.resumed_through_the_gateway(agent, payload, answered=[asked["toolCallId"]])


@pytest.mark.parametrize("variant", VARIANTS)
async def test_through_the_gateway_approve(hub, pydantic_ai, variant):
    order = new_order("PAI")
    agent = await paused_through_the_gateway(hub, variant, order)
    done = await resume_through_the_gateway(agent, {"approved": True})
    assert executed(pydantic_ai, order) == [{"agent": variant, "thread": agent.thread, "order": order, "amount": 42}]
    assert done.said() == [f"Done: refunded 42 EUR on {order}."]


@pytest.mark.parametrize("variant", VARIANTS)
async def test_through_the_gateway_edit(hub, pydantic_ai, variant):
    order, edited = new_order("PAI"), new_order("PAI")
    agent = await paused_through_the_gateway(hub, variant, order)
    done = await resume_through_the_gateway(agent, {"approved": True, "editedArgs": {"order": edited, "amount": 3}})
    assert executed(pydantic_ai, order) == []
    assert executed(pydantic_ai, edited) == [{"agent": variant, "thread": agent.thread, "order": edited, "amount": 3}]
    assert done.said() == [f"Done: refunded 3 EUR on {edited}."]


@pytest.mark.parametrize("variant", VARIANTS)
async def test_through_the_gateway_reject(hub, pydantic_ai, variant):
    order = new_order("PAI")
    agent = await paused_through_the_gateway(hub, variant, order)
    done = await resume_through_the_gateway(agent, {"approved": False, "reason": "not this one"})
    assert executed(pydantic_ai, order) == []
    assert done.said() == ["Not refunded: not this one"]
