"""What the ADK, CrewAI and Strands tests share: each framework's refund agent, served and registered once.

Each agent (tests/external/<name>_agent.py) runs in its own process and venv,
with a scripted model, and proposes ``issue_refund(order=<the user's message>,
amount=42)``; it keeps every refund it really issued (``GET /executed``), so a
test sees exactly which args ran, if any.
"""

import contextlib
import uuid

import httpx

from ..servers import free_port
from .agui_client import AguiClient
from .conftest import events, external_agent, finished_run, peer_python, pending, start, wait_for


@contextlib.contextmanager
def served(name: str, hub, workdir, *, timeout: float = 90):
    """The ``name`` refund agent on a free port, registered with ``hub`` as ``name``: yields its URL."""
    port = free_port()
    with external_agent([peer_python(name), f"tests/external/{name}_agent.py", "--port", port], workdir,
                        timeout=timeout):
        url = f"http://127.0.0.1:{port}"
        warm_up(url)
        with hub.api() as api:
            response = api.post("/api/agents/", json={"name": name, "url": f"{url}/"})
            assert response.status_code == 201, response.text
        yield url


def warm_up(url: str) -> None:
    """One run straight to the agent, read to its end: a framework's first run loads
    what it imports lazily, which can outlast the hub's short idle timeout here."""
    body = {"threadId": f"warm-up-{uuid.uuid4().hex[:8]}", "runId": "warm-up", "state": {}, "tools": [],
            "context": [], "forwardedProps": {}, "messages": [{"id": "warm-up", "role": "user", "content": "WARM-UP"}]}
    with httpx.stream("POST", f"{url}/", json=body, headers={"Accept": "text/event-stream"}, timeout=120) as response:
        assert response.status_code == 200, response.read()
        assert '"RUN_FINISHED"' in "".join(response.iter_text())


def new_order(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def executed(url: str, order: str) -> list[dict]:
    """The refunds the agent really issued for ``order``."""
    return [e for e in httpx.get(f"{url}/executed", timeout=10).json()["executed"] if e["order"] == order]


def said(api, thread: str, run_id: str) -> list[str]:
    return [e["payload"]["delta"] for e in events(api, thread)
            if e["run"] == run_id and e["type"] == "TEXT_MESSAGE_CONTENT"]


def paused(api, agent: str, order: str):
    """A new thread of ``agent`` whose first run asked to refund ``order``: (the run, its one interrupt)."""
    run = start(api, agent, message=order)
    first = finished_run(api, run["run_id"])
    assert first["status"] == "interrupted", (first["status"], first.get("error_code"), first.get("error_message"))
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    return run, asked


def succeeded(done: dict) -> None:
    assert done["status"] == "succeeded", (done["status"], done.get("error_code"), done.get("error_message"))


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


async def resumed_through_the_gateway(client: AguiClient, payload: dict):
    """The client's next run, answering its one open interrupt with ``payload``; it must finish."""
    [asked] = client.pending
    calls = [c["id"] for m in client.messages for c in m.get("toolCalls") or []]
    done = await client.run(resume=[{"interruptId": asked["id"], "status": "resolved", "payload": payload}])
    # ag-ui-validate reads one stream: a result for a call of the paused run, which
    # the input's messages hold (1.0 allows it), is AGUI207 to it.
    earlier = [f"error AGUI207: TOOL_CALL_RESULT references toolCallId '{c}', which was never started" for c in calls]
    assert [p for p in done.problems(severities=("error",)) if p not in earlier] == []
    assert done.last["type"] == "RUN_FINISHED", done.last
    assert client.pending == []
    return done
