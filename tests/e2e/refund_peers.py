"""What the framework tests share: each framework's refund agent, served and registered once, and its round trips.

Each agent (tests/external/<name>_agent.py, on tests/external/refund_service.py)
runs in its own process and venv, with a scripted model, and proposes
``issue_refund(order=<the user's message>, amount=42)``; it keeps every refund
it really issued (``GET /executed``), so a test sees exactly which args ran, if
any. Each test module keeps its own assertions on what its framework sends.
"""

import contextlib
import uuid

import httpx

from ..servers import free_port
from .agui_client import AguiClient
from .conftest import decide, events, external_agent, finished_run, peer_python, pending, resumed, start, wait_for


@contextlib.contextmanager
def served(name: str, hub, workdir, *, agents: dict[str, str] | None = None, warm: bool = True,
           timeout: float = 90):
    """The ``name`` refund agent on a free port, registered with ``hub``: yields its URL.

    ``agents`` maps each name to register to its path on the agent (default:
    ``name`` at ``/``); ``warm`` runs each path once before any test.
    """
    agents = agents or {name: "/"}
    port = free_port()
    with external_agent([peer_python(name), f"tests/external/{name}_agent.py", "--port", port], workdir,
                        timeout=timeout):
        url = f"http://127.0.0.1:{port}"
        if warm:
            for path in agents.values():
                warm_up(f"{url}{path}")
        with hub.api() as api:
            for agent, path in agents.items():
                response = api.post("/api/agents/", json={"name": agent, "url": f"{url}{path}"})
                assert response.status_code == 201, response.text
        yield url


def warm_up(url: str) -> None:
    """One run straight to the agent, read to its end: a framework's first run loads
    what it imports lazily, which can outlast the hub's short idle timeout here."""
    body = {"threadId": f"warm-up-{uuid.uuid4().hex[:8]}", "runId": "warm-up", "state": {}, "tools": [],
            "context": [], "forwardedProps": {}, "messages": [{"id": "warm-up", "role": "user", "content": "WARM-UP"}]}
    with httpx.stream("POST", url, json=body, headers={"Accept": "text/event-stream"}, timeout=120) as response:
        assert response.status_code == 200, response.read()
        assert '"RUN_FINISHED"' in "".join(response.iter_text())


def new_order(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def executed(url: str, order: str) -> list[dict]:
    """The refunds the agent really issued for ``order``."""
    return [e for e in httpx.get(f"{url}/executed", timeout=10).json()["executed"] if e["order"] == order]


def said(api, thread: str, run_id: str) -> list[str]:
    """The text deltas run ``run_id`` streamed, in order."""
    return [e["payload"]["delta"] for e in events(api, thread)
            if e["run"] == run_id and e["type"] == "TEXT_MESSAGE_CONTENT"]


# --- Through the hub ---------------------------------------------------------------


def paused(api, agent: str, order: str):
    """A new thread of ``agent`` whose first run asked to refund ``order``: (the run, its one interrupt)."""
    run = start(api, agent, message=order)
    first = finished_run(api, run["run_id"])
    assert first["status"] == "interrupted", (first["status"], first.get("error_code"), first.get("error_message"))
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    return run, asked


def shows_the_refund(api, asked: dict, order: str) -> None:
    """The inbox entry and the interrupt's page both show the refund itself, with its proposed args."""
    detail = api.get(f"/api/interrupts/{asked['id']}/").json()
    for shown in (asked, detail):
        assert shown["tool_name"] == "issue_refund", shown["tool_name"]
        assert shown["proposed_args"] == {"order": order, "amount": 42}


def succeeded(done: dict) -> None:
    assert done["status"] == "succeeded", (done["status"], done.get("error_code"), done.get("error_message"))


def decided(api, asked: dict, **decision) -> dict:
    """``asked`` decided through the API: the run that resumed it, which must have succeeded."""
    decide(api, asked, **decision)
    done = resumed(api, asked)
    succeeded(done)
    return done


# --- Through the gateway, as an AG-UI client that keeps its own history -------------


def gateway_client(hub, agent: str) -> AguiClient:
    return AguiClient(f"{hub.url}/agui/{agent}/", {"Authorization": f"Token {hub.token}"},
                      f"{agent}-gw-{uuid.uuid4().hex[:10]}")


async def paused_through_the_gateway(hub, agent: str, order: str) -> AguiClient:
    """An AG-UI client of ``agent`` through the gateway, whose first run asked to refund ``order``."""
    client = gateway_client(hub, agent)
    client.say(order)
    first = await client.run()
    assert first.problems(severities=("error",)) == []
    assert first.last["type"] == "RUN_FINISHED" and len(client.pending) == 1, first.last
    return client


async def resumed_through_the_gateway(client: AguiClient, payload: dict, *, answered: list[str] | None = None):
    """The client's next run, answering its one open interrupt with ``payload``; it must finish.

    ``answered``: the calls of the paused run whose results this run may
    stream (default: every call the client holds).
    """
    [asked] = client.pending
    if answered is None:
        answered = [c["id"] for m in client.messages for c in m.get("toolCalls") or []]
    done = await client.run(resume=[{"interruptId": asked["id"], "status": "resolved", "payload": payload}])
    # ag-ui-validate reads one stream: a result for a call of the paused run, which
    # the input's messages hold (1.0 allows it), is AGUI207 to it.
    earlier = [f"error AGUI207: TOOL_CALL_RESULT references toolCallId '{c}', which was never started"
               for c in answered]
    assert [p for p in done.problems(severities=("error",)) if p not in earlier] == []
    assert done.last["type"] == "RUN_FINISHED", done.last
    assert client.pending == []
    return done
