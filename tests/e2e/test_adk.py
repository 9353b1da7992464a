"""The hub against Google ADK on its own AG-UI adapter (ag-ui-adk 0.11.0, google-adk 2.13.0).

The agent (tests/external/adk_agent.py) runs in its own process and venv, with
a scripted BaseLlm, and one ``FunctionTool(issue_refund, require_confirmation=True)``
served with ``emit_interrupt_outcome=True``. ADK pauses on its own wrapper
call, ``adk_request_confirmation``, whose args carry the real call; the
interrupt has no responseSchema, and ADK takes ``{"approved": true|false}``.
ADK offers no edits. Approve and reject, through the hub's API and through the
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
    shows_the_refund,
)

# What a framework sends, and how the hub reads it, is the same whatever stores it: `make test` runs
# it on SQLite; the PostgreSQL pass leaves it out (``backend_free``) and runs the hub's own end to end.
pytestmark = pytest.mark.backend_free


@pytest.fixture(scope="module")
def adk(tmp_path_factory, hub):
    with served("adk", hub, tmp_path_factory.mktemp("adk")) as url:
        yield url


def test_the_card_shows_the_tool_adk_asks_about_not_its_wrapper(api, adk):
    order = new_order("ADK")
    run, asked = paused(api, "adk", order)
    assert asked["reason"] == "confirmation"
    shows_the_refund(api, asked, order)


def test_approve(api, adk):
    order = new_order("ADK")
    run, asked = paused(api, "adk", order)
    assert executed(adk, order) == []  # nothing runs before the decision
    done = decided(api, asked, action="approve")
    assert executed(adk, order) == [{"thread": run["thread"], "order": order, "amount": 42}]
    assert said(api, run["thread"], done["run_id"]) == [f"Done: refunded 42 EUR on {order}."]


def test_reject(api, adk):
    order = new_order("ADK")
    run, asked = paused(api, "adk", order)
    done = decided(api, asked, action="reject")
    assert executed(adk, order) == []
    assert said(api, run["thread"], done["run_id"]) == ["The refund was not issued."]


async def test_through_the_gateway_approve(hub, adk):
    order = new_order("ADK")
    client = await paused_through_the_gateway(hub, "adk", order)
    [asked] = client.pending
    assert asked["metadata"]["adk"]["originalFunctionCall"]["args"] == {"order": order, "amount": 42}
    done = await resumed_through_the_gateway(client, {"approved": True})
    assert executed(adk, order) == [{"thread": client.thread, "order": order, "amount": 42}]
    assert done.said() == [f"Done: refunded 42 EUR on {order}."]


async def test_through_the_gateway_reject(hub, adk):
    order = new_order("ADK")
    client = await paused_through_the_gateway(hub, "adk", order)
    done = await resumed_through_the_gateway(client, {"approved": False})
    assert executed(adk, order) == []
    assert done.said() == ["The refund was not issued."]
