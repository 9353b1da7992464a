"""The hub against a CrewAI Flow on its own AG-UI adapter (ag-ui-crewai 1.0.0, crewai 1.15.30).

The agent (tests/external/crewai_agent.py) runs in its own process and venv,
with no LLM: a Flow whose first step proposes ``issue_refund(order, amount)``
and asks for feedback with ``@human_feedback(provider=agui_feedback_provider)``,
served with ``emit_interrupt_outcome=True``. The interrupt's id is the thread
id, its reason ``crewai:human_feedback``; it has no ``toolCallId`` and no
schema, and the proposal is in ``metadata.crewai.output``. The next step gets
the answer as JSON text and issues the refund only on ``{"approved": true}``.
CrewAI offers no edits. Approve and reject, through the hub's API and through
the gateway: the refund runs with exactly the proposed args, or not at all,
and the run finishes.
"""

import pytest

from .refund_peers import (
    decided,
    executed,
    new_order,
    paused,
    paused_through_the_gateway,
    resumed_through_the_gateway,
    served,
    shows_the_refund,
)

# What a framework sends, and how the hub reads it, is the same whatever stores it: `make test` runs
# it on SQLite; the PostgreSQL pass leaves it out (``backend_free``) and runs the hub's own end to end.
pytestmark = pytest.mark.backend_free


@pytest.fixture(scope="module")
def crewai(tmp_path_factory, hub):
    # crewai imports much (LiteLLM, OpenAI's client, ChromaDB's): slow to start on a busy machine.
    with served("crewai", hub, tmp_path_factory.mktemp("crewai"), timeout=180) as url:
        yield url


def test_the_card_shows_the_proposal(api, crewai):
    order = new_order("CRW")
    run, asked = paused(api, "crewai", order)
    assert asked["reason"] == "crewai:human_feedback" and asked["interrupt_id"] == run["thread"]
    shows_the_refund(api, asked, order)


def test_approve(api, crewai):
    order = new_order("CRW")
    run, asked = paused(api, "crewai", order)
    assert executed(crewai, order) == []  # nothing runs before the decision
    decided(api, asked, action="approve")
    assert executed(crewai, order) == [{"thread": run["thread"], "order": order, "amount": 42}]


def test_reject(api, crewai):
    order = new_order("CRW")
    run, asked = paused(api, "crewai", order)
    decided(api, asked, action="reject")
    assert executed(crewai, order) == []


async def test_through_the_gateway_approve(hub, crewai):
    order = new_order("CRW")
    client = await paused_through_the_gateway(hub, "crewai", order)
    [asked] = client.pending
    assert asked["metadata"]["crewai"]["output"] == {"tool": "issue_refund", "args": {"order": order, "amount": 42}}
    await resumed_through_the_gateway(client, {"approved": True})
    assert executed(crewai, order) == [{"thread": client.thread, "order": order, "amount": 42}]


async def test_through_the_gateway_reject(hub, crewai):
    order = new_order("CRW")
    client = await paused_through_the_gateway(hub, "crewai", order)
    await resumed_through_the_gateway(client, {"approved": False})
    assert executed(crewai, order) == []
