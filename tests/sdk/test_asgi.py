"""An SDK agent served by any ASGI server, without Django: ``interrupts.sdk.asgi.agent_app``.

The app is called as an ASGI server calls it (a scope, a receive and a send
channel) and answers each request as the Django view does, byte for byte;
then tests/sdk/asgi_agent.py runs under real uvicorn in a process of its own
with no Django settings, and the hub (``served``: `manage.py serve`) drives
it through an interrupt, a decision and a signed resume.
"""

import asyncio
import json
import os
import subprocess
import sys

import httpx
import pytest
from django.test import AsyncRequestFactory, override_settings

from interrupts import conf
from interrupts.demo.views import agent_view
from interrupts.sdk import Agent
from interrupts.sdk.asgi import agent_app
from interrupts.sdk.driver import MAX_REQUEST_BYTES

from ..e2e.conftest import wait_for
from ..servers import ROOT, free_port, stop_process
from ..waiting import until
from .test_verify import SECRET, Shipper, entry, resume_input, signed

FIRST = json.dumps({"threadId": "t", "runId": "r1", "messages": []}).encode()


class Reply:
    def __init__(self, status: int, headers: dict, body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def events(self) -> list[dict]:
        text = self.body.decode()
        return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]

    def essence(self):
        """What a client can rely on: status, content type, the JSON body or each event's type and code."""
        kind = self.headers.get("content-type")
        if kind == "text/event-stream":
            return self.status, kind, [(e["type"], e.get("code")) for e in self.events()]
        return self.status, kind, self.json(), self.headers.get("allow")


def scope(method: str, headers: dict) -> dict:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": "/agent/", "raw_path": b"/agent/", "query_string": b"", "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8001),
    }


async def asgi(app, method="POST", body=b"", headers=None, *, chunks=None, then=None) -> Reply:
    """One request through ``app``: the body in ``chunks`` (default: one), then ``then`` messages, if any."""
    incoming: asyncio.Queue = asyncio.Queue()
    parts = [body] if chunks is None else chunks
    for n, part in enumerate(parts):
        incoming.put_nowait({"type": "http.request", "body": part, "more_body": n < len(parts) - 1})
    for message in then or ():
        incoming.put_nowait(message)
    sent = []

    async def send(message):
        sent.append(message)

    if headers is None:
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    await asyncio.wait_for(app(scope(method, headers), incoming.get, send), timeout=10)
    [start] = [m for m in sent if m["type"] == "http.response.start"]
    reply_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return Reply(start["status"], reply_headers, b"".join(m.get("body", b"") for m in sent[1:]))


async def django(view, method="POST", body=b"", headers=None, content_type="application/json") -> Reply:
    request = AsyncRequestFactory().generic(method, "/agent/", data=body, content_type=content_type,
                                            headers=headers or {})
    response = await view(request)
    if getattr(response, "streaming", False):
        raw = b"".join([chunk async for chunk in response.streaming_content])
    else:
        raw = response.content
    return Reply(response.status_code, {k.lower(): v for k, v in response.headers.items()}, raw)


NUL = json.dumps({"threadId": "t", "runId": "r1", "messages": [{"id": "m", "role": "user", "content": "a\x00b"}]})


# (method, body, content type, extra headers), each sent to both servers.
REQUESTS = {
    "get": ("GET", b"", "application/json", {}),
    "text": ("POST", FIRST, "text/plain", {}),
    "charset": ("POST", FIRST, "application/json; charset=utf-8", {}),
    "not json": ("POST", b"{not json", "application/json", {}),
    "no thread": ("POST", b'{"runId": "r1", "messages": []}', "application/json", {}),
    "nul": ("POST", NUL.encode(), "application/json", {}),
    "unsigned": ("POST", FIRST, "application/json", {}),
    "forged": ("POST", FIRST, "application/json", {"signature": lambda: signed(FIRST, secret="css_forged")}),
    "signed": ("POST", FIRST, "application/json", {"signature": lambda: signed(FIRST)}),
    "bad signature, no json": ("POST", b"{", "application/json", {"signature": lambda: signed(b"}")}),
    "too large": ("POST", b"x" * 2000, "application/json", {}),
}


@pytest.mark.parametrize("name", REQUESTS)
@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
async def test_the_asgi_app_answers_every_request_as_the_django_view_does(name):
    method, body, content_type, extra = REQUESTS[name]
    headers = extra["signature"]() if "signature" in extra else {}
    # Unsigned requests are refused only where that is the case; the rest reach the body checks.
    agent = Shipper(signing_secret=SECRET, require_signature=name == "unsigned")
    by_asgi = await asgi(agent_app(agent, max_body_bytes=1000), method, body,
                         {"Content-Type": content_type, "Content-Length": str(len(body)), **headers})
    by_django = await django(agent_view(agent), method, body, headers, content_type)
    assert by_asgi.essence() == by_django.essence()
    if by_asgi.headers["content-type"] == "application/json":
        assert by_asgi.body == by_django.body  # the same bytes, not just equal JSON
    else:
        assert by_asgi.headers["cache-control"] == "no-cache" and by_asgi.headers["x-accel-buffering"] == "no"
    expected = {"get": 405, "text": 415, "not json": 400, "no thread": 400, "nul": 400, "too large": 413}
    assert by_asgi.status == expected.get(name, 200)


async def test_a_signed_resume_is_checked_as_by_the_django_view():
    agent = Shipper(signing_secret=SECRET)
    app = agent_app(agent)
    good = json.dumps(resume_input(entry())).encode()
    reply = await asgi(app, body=good, headers={"content-type": "application/json", **signed(good)})
    assert reply.events()[-1]["result"] == {"approvers": ["ann"]}
    moved = json.dumps(resume_input(entry(thread="other"))).encode()
    reply = await asgi(app, body=moved, headers={"content-type": "application/json", **signed(moved)})
    assert [e["type"] for e in reply.events()] == ["RUN_STARTED", "RUN_ERROR"]
    assert reply.events()[-1]["code"] == "BAD_FINGERPRINT" and agent.ran == 1


async def test_a_credential_is_checked_on_the_scope_before_the_body_is_read():
    seen = []

    async def auth(request_scope):
        seen.append(request_scope["path"])
        return dict(request_scope["headers"]).get(b"authorization") == b"Bearer ok"

    agent = Shipper()
    app = agent_app(agent, auth)
    refused = await asgi(app, body=FIRST, headers={"content-type": "application/json", "authorization": "Bearer no"})
    assert (refused.status, refused.json()["code"]) == (401, "UNAUTHORIZED") and agent.ran == 0
    allowed = await asgi(app, body=FIRST, headers={"content-type": "application/json", "authorization": "Bearer ok"})
    assert allowed.events()[-1]["type"] == "RUN_FINISHED" and seen == ["/agent/", "/agent/"]


async def test_a_chunked_body_past_the_bound_is_refused_without_a_declared_length():
    agent = Shipper()
    reply = await asgi(agent_app(agent, max_body_bytes=100), body=b"", headers={"content-type": "application/json"},
                       chunks=[b"{" + b" " * 60, b" " * 60 + b"}"])
    assert (reply.status, reply.json()["code"]) == (413, "TOO_LARGE") and agent.ran == 0
    # Within the bound, the chunks are one body.
    reply = await asgi(agent_app(agent, max_body_bytes=100), headers={"content-type": "application/json"},
                       chunks=[FIRST[:10], FIRST[10:]])
    assert reply.events()[-1]["type"] == "RUN_FINISHED"


async def test_a_content_length_that_is_not_ascii_digits_is_not_a_crash():
    # "²".isdigit() is True: a server that passes the header through must not make the app fail.
    agent = Shipper()
    reply = await asgi(agent_app(agent), body=FIRST, headers={"content-type": "application/json",
                                                              "content-length": "²"})
    assert reply.status == 200 and reply.events()[-1]["type"] == "RUN_FINISHED"


async def test_a_body_within_the_request_bound_is_taken_whole_however_large():
    # The bound is the one applied while reading (413 past it); parsing did not
    # refuse a 9 MiB body with 400 below it.
    agent = Shipper()
    big = json.dumps({"threadId": "t", "runId": "r1", "state": {"pad": "x" * (9 * 1024 * 1024)},
                      "messages": []}).encode()
    reply = await asgi(agent_app(agent), body=big, headers={"content-type": "application/json"})
    assert reply.status == 200 and reply.events()[-1]["type"] == "RUN_FINISHED"


async def test_a_body_that_trickles_in_past_the_deadline_gets_408_and_runs_nothing():
    # A first chunk, then nothing: the agent's server is not held for ever.
    agent = Shipper()
    app = agent_app(agent, body_timeout=0.2)
    incoming: asyncio.Queue = asyncio.Queue()
    incoming.put_nowait({"type": "http.request", "body": b'{"threadId"', "more_body": True})
    sent = []

    async def send(message):
        sent.append(message)

    await asyncio.wait_for(app(scope("POST", {"content-type": "application/json"}), incoming.get, send), timeout=5)
    [start] = [m for m in sent if m["type"] == "http.response.start"]
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert (start["status"], body["code"]) == (408, "REQUEST_TIMEOUT") and agent.ran == 0


def test_the_default_bound_is_the_hubs_request_bound():
    assert MAX_REQUEST_BYTES == conf.DEFAULTS["COUNTERSIGN_MAX_REQUEST_BYTES"]


async def test_lifespan_is_accepted():
    incoming: asyncio.Queue = asyncio.Queue()
    for kind in ("lifespan.startup", "lifespan.shutdown"):
        incoming.put_nowait({"type": kind})
    sent = []

    async def send(message):
        sent.append(message["type"])

    await asyncio.wait_for(agent_app(Shipper())({"type": "lifespan"}, incoming.get, send), timeout=5)
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


class Waiter(Agent):
    """Says one thing, then waits for ever: only the client going away ends its run."""

    remember_runs = 0  # a deduping agent runs to its end whoever listens (tests/sdk/test_dedupe.py)

    def __init__(self):
        super().__init__()
        self.started, self.cancelled = asyncio.Event(), asyncio.Event()

    async def run(self, ctx):
        ctx.say("waiting")
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


async def test_a_client_that_disconnects_mid_stream_stops_an_agent_that_does_not_dedupe():
    agent = Waiter()
    incoming: asyncio.Queue = asyncio.Queue()
    incoming.put_nowait({"type": "http.request", "body": FIRST, "more_body": False})
    sent = []

    async def send(message):
        sent.append(message)

    served = asyncio.ensure_future(agent_app(agent)(scope("POST", {"content-type": "application/json"}),
                                                    incoming.get, send))
    await asyncio.wait_for(agent.started.wait(), timeout=5)
    await until(lambda: b"waiting" in b"".join(m.get("body", b"") for m in sent))  # the client has heard it
    incoming.put_nowait({"type": "http.disconnect"})
    await asyncio.wait_for(served, timeout=5)
    await asyncio.wait_for(agent.cancelled.wait(), timeout=5)
    said = b"".join(m.get("body", b"") for m in sent[1:])
    assert b"RUN_STARTED" in said and b"waiting" in said and b"RUN_FINISHED" not in said


async def test_a_client_that_disconnects_before_its_body_arrives_gets_nothing():
    agent = Shipper()
    incoming: asyncio.Queue = asyncio.Queue()
    incoming.put_nowait({"type": "http.request", "body": FIRST[:10], "more_body": True})
    incoming.put_nowait({"type": "http.disconnect"})
    sent = []

    async def send(message):
        sent.append(message)

    await asyncio.wait_for(agent_app(agent)(scope("POST", {"content-type": "application/json"}), incoming.get, send),
                           timeout=5)
    assert sent == [] and agent.ran == 0


# --- No Django: a fresh interpreter, then a real uvicorn process ---------------------------


def no_django_env(**extra: str) -> dict:
    # Nothing of Django's: no settings module, no database; the SDK alone.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **extra}


def test_importing_the_asgi_app_loads_no_django():
    code = ("import sys, tests.sdk.asgi_agent\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'channels', 'daphne')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=no_django_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


AGENTS = ("asgi-shipper", "asgi-stream-only", "asgi-stream-only-bound")


@pytest.fixture(scope="module")
def uvicorn_agents(served, tmp_path_factory):
    """tests/sdk/asgi_agent.py under uvicorn, each agent registered with the hub, the signing secrets passed by env."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    secrets = {}
    with served.api() as api:
        for name in AGENTS:
            created = api.post("/api/agents/", json={"name": name, "url": f"{url}/{name}/"})
            assert created.status_code == 201, created.text
            secrets[name] = created.json()["signing_secret"]
            # The demo reviewer starts the run and approves it: this agent's operator allows that.
            policy = api.post("/api/policies/", json={"name": f"{name} self-approval", "agent": name,
                                                      "allow_self_approval": True})
            assert policy.status_code == 201, policy.text
    log = tmp_path_factory.mktemp("uvicorn") / "agent.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "tests.sdk.asgi_agent:app", "--host", "127.0.0.1",
             "--port", str(port), "--lifespan", "on", "--no-access-log"],
            cwd=ROOT, env=no_django_env(AGENT_SIGNING_SECRETS=json.dumps(secrets)),
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "Uvicorn running on" in log.read_text() or process.poll() is not None, timeout=30)
        assert process.poll() is None, log.read_text()
        yield url
    finally:
        stop_process(process)


def approved_through_the_hub(served, name: str) -> tuple[dict, list[dict]]:
    """Start a run of ``name``, see it interrupt on its tool call, approve it: the resumed run and thread's events."""
    with served.api() as api:
        started = api.post("/api/threads/", json={"agent": name, "message": "ship it"})
        assert started.status_code == 201, started.text
        thread, run_id = started.json()["thread"], started.json()["run_id"]

        def pending():
            return api.get("/api/interrupts/", params={"thread": thread}).json()["results"]

        [asked] = wait_for(pending)
        assert asked["reason"] == "tool_call" and asked["tool_name"] == "ship"
        assert asked["proposed_args"] == {"crate": 7}
        assert api.get(f"/api/runs/{run_id}/").json()["status"] == "interrupted"

        decided = api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "approve"})
        assert decided.status_code == 201, decided.text

        def resumed_run():
            detail = api.get(f"/api/interrupts/{asked['id']}/").json()
            run = detail["resumed_by"] and api.get(f"/api/runs/{detail['resumed_by']}/").json()
            return run and run["status"] not in ("queued", "streaming") and run

        resumed = wait_for(resumed_run)
        assert resumed["input"]["resume"][0]["metadata"]["countersign"]["fingerprint"].startswith("sha256:")
        return resumed, api.get(f"/api/threads/{thread}/events/", params={"limit": 1000}).json()["events"]


def said(events: list[dict]) -> list[str]:
    return [e["payload"].get("delta") for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]


def test_the_hub_runs_a_uvicorn_agent_through_an_interrupt_and_a_signed_resume(served, uvicorn_agents):
    resumed, events = approved_through_the_hub(served, "asgi-shipper")
    assert resumed["status"] == "succeeded", resumed
    # The agent went on only after the SDK checked the hub's signature and the answer's fingerprint.
    assert said(events)[-1] == "Shipped crate 7, approved by reviewer."
    [result] = [e["payload"]["result"] for e in events if e["type"] == "RUN_FINISHED" and e["payload"].get("result")]
    assert result == {"approvers": ["reviewer"], "djangoLoaded": False}

    # The agent verifies: a request the hub did not sign never reaches its code.
    url = f"{uvicorn_agents}/asgi-shipper/"
    unsigned = httpx.post(url, content=FIRST, headers={"content-type": "application/json"}, timeout=10)
    assert unsigned.status_code == 200 and unsigned.headers["content-type"] == "text/event-stream"
    assert '"code":"BAD_SIGNATURE"' in unsigned.text.replace(" ", "")
    wrong = httpx.get(url, timeout=10)
    assert (wrong.status_code, wrong.json()["code"], wrong.headers["allow"]) == (405, "METHOD_NOT_ALLOWED", "POST")


def test_a_tool_call_streamed_without_a_snapshot_needs_the_agent_to_name_it(served, uvicorn_agents):
    # verify.conversation_tool_call_ids: the signed conversation holds only what a
    # MESSAGES_SNAPSHOT held, so the default cannot bind an answer to a call streamed bare.
    resumed, events = approved_through_the_hub(served, "asgi-stream-only")
    assert (resumed["status"], resumed["error_code"]) == ("failed", "BAD_FINGERPRINT"), resumed
    assert "Shipped crate 7, approved by reviewer." not in said(events)
    # Saying which call the interrupt was about (Agent.tool_call_ids_for) binds it.
    resumed, events = approved_through_the_hub(served, "asgi-stream-only-bound")
    assert resumed["status"] == "succeeded", resumed
    assert said(events)[-1] == "Shipped crate 7, approved by reviewer."
