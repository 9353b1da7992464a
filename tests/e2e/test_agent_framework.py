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

import pytest

from . import refund_peers
from .refund_peers import decided, executed, new_order, said, served

# What a framework sends, and how the hub reads it, is the same whatever stores it: `make test` runs
# it on SQLite; the PostgreSQL pass leaves it out (``backend_free``) and runs the hub's own end to end.
pytestmark = pytest.mark.backend_free


@pytest.fixture(scope="module")
def agent_framework(tmp_path_factory, hub):
    """The Agent Framework agent in its own process, registered with the hub as maf-refund."""
    with served("agent_framework", hub, tmp_path_factory.mktemp("agent_framework"), warm=False, timeout=60,
                agents={"maf-refund": "/refund/"}) as url:
        yield url


def paused(api, order: str):
    """A new thread whose first run asked to refund ``order``: (the run, its one interrupt)."""
    run, asked = refund_peers.paused(api, "maf-refund", order)
    assert asked["reason"] == "tool_call"
    # The card shows the real call, not the synthetic confirm_changes beside it.
    assert asked["tool_name"] == "issue_refund"
    assert asked["proposed_args"] == {"order": order, "amount": 42}
    assert asked["supports_edits"] is True
    return run, asked


# --- Through the hub ---------------------------------------------------------------


def test_approve(api, agent_framework):
    order = new_order("MAF")
    run, asked = paused(api, order)
    assert executed(agent_framework, order) == []  # nothing runs before the decision
    done = decided(api, asked, action="approve")
    assert executed(agent_framework, order) == [{"order": order, "amount": 42}]
    assert "".join(said(api, run["thread"], done["run_id"])) == f"Done: refunded 42 EUR on {order}."


def test_edit(api, agent_framework):
    order, edited = new_order("MAF"), new_order("MAF")
    run, asked = paused(api, order)
    done = decided(api, asked, action="edit", edited_args={"order": edited, "amount": 7})
    assert executed(agent_framework, order) == []
    assert executed(agent_framework, edited) == [{"order": edited, "amount": 7}]
    assert "".join(said(api, run["thread"], done["run_id"])) == f"Done: refunded 7 EUR on {edited}."


def test_reject(api, agent_framework):
    order = new_order("MAF")
    run, asked = paused(api, order)
    done = decided(api, asked, action="reject")
    assert executed(agent_framework, order) == []
    assert "".join(said(api, run["thread"], done["run_id"])).startswith("Not refunded: ")


# --- Through the gateway, as an AG-UI client that keeps its own history -------------


async def paused_through_the_gateway(hub, order: str):
    agent = await refund_peers.paused_through_the_gateway(hub, "maf-refund", order)
    [asked] = agent.pending
    [call] = [c for m in agent.messages if m["role"] == "assistant" for c in m.get("toolCalls") or []
              if c["id"] == asked["toolCallId"]]
    assert call["function"]["name"] == "issue_refund"
    return agent


async def resume_through_the_gateway(agent, payload: dict):
    # The only result from the paused run this one may stream: the approved call's, not confirm_changes'.
    [asked] = agent.pending
    return await refund_peers.resumed_through_the_gateway(agent, payload, answered=[asked["toolCallId"]])


async def test_through_the_gateway_approve(hub, agent_framework):
    order = new_order("MAF")
    agent = await paused_through_the_gateway(hub, order)
    done = await resume_through_the_gateway(agent, {"approved": True})
    assert executed(agent_framework, order) == [{"order": order, "amount": 42}]
    assert done.said() == [f"Done: refunded 42 EUR on {order}."]


async def test_through_the_gateway_edit(hub, agent_framework):
    order, edited = new_order("MAF"), new_order("MAF")
    agent = await paused_through_the_gateway(hub, order)
    done = await resume_through_the_gateway(agent, {"approved": True, "editedArgs": {"order": edited, "amount": 3}})
    assert executed(agent_framework, order) == []
    assert executed(agent_framework, edited) == [{"order": edited, "amount": 3}]
    assert done.said() == [f"Done: refunded 3 EUR on {edited}."]


async def test_through_the_gateway_reject(hub, agent_framework):
    order = new_order("MAF")
    agent = await paused_through_the_gateway(hub, order)
    done = await resume_through_the_gateway(agent, {"approved": False})
    assert executed(agent_framework, order) == []
    [text] = done.said()
    assert text.startswith("Not refunded: ")
