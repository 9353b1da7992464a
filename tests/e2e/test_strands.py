"""The hub against AWS Strands on its own AG-UI adapter (ag-ui-strands 1.0.2, strands-agents 1.62.0).

The agent (tests/external/strands_agent.py) runs in its own process and venv,
with a scripted model, and one tool, ``issue_refund``, configured with
``ToolBehavior(interrupt_on_call=True)``: ag-ui-strands interrupts before it
runs (reason ``tool_call``, the call's ``toolCallId``, schema
``{approved: boolean}``) and runs it only on ``{"approved": true}``. Strands
offers no edits. Approve and reject, through the hub's API and through the
gateway: the refund runs with exactly the proposed args, or not at all, and
the run finishes.
"""

import pytest

from .refund_peers import (
    decided,
    executed,
    new_order,
    paused,
    paused_through_the_gateway,
    resumed_through_the_gateway,
    said,
    served,
)

# What a framework sends, and how the hub reads it, is the same whatever stores it: `make test` runs
# it on SQLite; the PostgreSQL pass leaves it out (``backend_free``) and runs the hub's own end to end.
pytestmark = pytest.mark.backend_free


@pytest.fixture(scope="module")
def strands(tmp_path_factory, hub):
    with served("strands", hub, tmp_path_factory.mktemp("strands")) as url:
        yield url


def test_the_card_shows_the_call(api, strands):
    order = new_order("STR")
    run, asked = paused(api, "strands", order)
    assert asked["reason"] == "tool_call" and asked["tool_call_id"].startswith("call_refund_")
    assert asked["tool_name"] == "issue_refund"
    assert asked["proposed_args"] == {"order": order, "amount": 42}
    assert asked["supports_edits"] is False  # its schema is {approved} only


def test_approve(api, strands):
    order = new_order("STR")
    run, asked = paused(api, "strands", order)
    assert executed(strands, order) == []  # nothing runs before the decision
    done = decided(api, asked, action="approve")
    assert executed(strands, order) == [{"thread": run["thread"], "order": order, "amount": 42}]
    assert said(api, run["thread"], done["run_id"]) == [f"Done: refunded 42 EUR on {order}."]


def test_reject(api, strands):
    order = new_order("STR")
    run, asked = paused(api, "strands", order)
    done = decided(api, asked, action="reject")
    assert executed(strands, order) == []
    [reply] = said(api, run["thread"], done["run_id"])
    assert reply.startswith("The refund was not issued: ")


async def test_through_the_gateway_approve(hub, strands):
    order = new_order("STR")
    client = await paused_through_the_gateway(hub, "strands", order)
    done = await resumed_through_the_gateway(client, {"approved": True})
    assert executed(strands, order) == [{"thread": client.thread, "order": order, "amount": 42}]
    assert done.said() == [f"Done: refunded 42 EUR on {order}."]


async def test_through_the_gateway_reject(hub, strands):
    order = new_order("STR")
    client = await paused_through_the_gateway(hub, "strands", order)
    done = await resumed_through_the_gateway(client, {"approved": False})
    assert executed(strands, order) == []
    assert done.said()[0].startswith("The refund was not issued: ")
