"""The SDK installed alone: the countersign-sdk wheel in a venv without Django, serving an agent through the hub.

`make .venv-sdk/.installed` builds the wheel (`make sdk`) and the venv from
tests/external/requirements-sdk.txt, once, and again only when the SDK's
sources change. The agent (tests/external/sdk_agent.py) imports
``countersign.sdk``; the hub signs its resume and the agent checks it.
"""

import json
import subprocess

import httpx
import pytest

from ..servers import ROOT, free_port
from .conftest import decide, events, external_agent, finished_run, pending, resumed, start, wait_for

# What a framework sends, and how the hub reads it, is the same whatever stores it: `make test` runs
# it on SQLite; the PostgreSQL pass leaves it out (``backend_free``) and runs the hub's own end to end.
pytestmark = pytest.mark.backend_free

VENV = ROOT / ".venv-sdk"
# Every module of the wheel, imported: each one loads without Django, which is not there to load.
IMPORT_ALL = """
import importlib, json, pkgutil, sys, countersign
names = [m.name for m in pkgutil.walk_packages(countersign.__path__, "countersign.")]
for name in names:
    importlib.import_module(name)
missing = {}
for name in ("django", "interrupts", "channels", "rest_framework"):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as gone:
        missing[name] = gone.name
print(json.dumps({"modules": names, "missing": missing, "file": countersign.__file__}))
"""


@pytest.fixture(scope="module")
def sdk_python():
    built = subprocess.run(["make", "--no-print-directory", ".venv-sdk/.installed"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    return VENV / "bin" / "python"


def test_the_wheel_imports_whole_without_django_or_the_app(sdk_python):
    # -I: the checkout is not on sys.path, so `interrupts` could only come from the venv.
    done = subprocess.run([sdk_python, "-I", "-c", IMPORT_ALL], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["file"].startswith(str(VENV))
    assert {"countersign.sdk.asgi", "countersign.sdk.verify", "countersign.protocol.signing",
            "countersign.protocol.schema"} <= set(found["modules"])
    assert found["missing"] == {"django": "django", "interrupts": "interrupts", "channels": "channels",
                                "rest_framework": "rest_framework"}


@pytest.fixture(scope="module")
def sdk_agent(sdk_python, hub, tmp_path_factory):
    """tests/external/sdk_agent.py under uvicorn in .venv-sdk, registered with the hub as sdk-refunder: its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with hub.api() as api:
        created = api.post("/api/agents/", json={"name": "sdk-refunder", "url": url})
        assert created.status_code == 201, created.text
    with external_agent([sdk_python, "-I", "tests/external/sdk_agent.py", "--port", port,
                         "--secret", created.json()["signing_secret"]],
                        tmp_path_factory.mktemp("sdk_agent"), ready="Uvicorn running on", timeout=30):
        yield url


def test_the_hub_runs_the_packaged_agent_through_an_interrupt_and_a_signed_resume(api, sdk_agent):
    run = start(api, "sdk-refunder")
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    assert (asked["interrupt_id"], asked["message"]) == ("approve-refund", "Refund 30 EUR for order 1234?")

    decide(api, asked, action="approve")
    done = resumed(api, asked)
    assert done["status"] == "succeeded", (done["status"], done.get("error_code"), done.get("error_message"))
    said = [e["payload"]["delta"] for e in events(api, run["thread"])
            if e["run"] == done["run_id"] and e["type"] == "TEXT_MESSAGE_CONTENT"]
    # The agent acted only after the SDK checked the hub's signature and the answer's fingerprint.
    assert said == ["Refunded 30 EUR, approved by reviewer."]
    [finished] = [e["payload"] for e in events(api, run["thread"])
                  if e["run"] == done["run_id"] and e["type"] == "RUN_FINISHED"]
    assert finished["result"]["sdk"].startswith(str(VENV)) and finished["result"]["loaded"] == []


def test_the_packaged_agent_refuses_a_request_the_hub_did_not_sign(sdk_agent):
    body = {"threadId": "t", "runId": "r1", "messages": [], "state": {}, "tools": [], "context": [],
            "forwardedProps": {}}
    with httpx.stream("POST", sdk_agent, json=body, timeout=10) as response:
        streamed = "".join(response.iter_text())
    assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
    assert '"code":"BAD_SIGNATURE"' in streamed.replace(" ", "") and "Refunds need a human." not in streamed


DRIVE_THE_EXAMPLE = """
import asyncio, json, os, re, sys
from ag_ui.core import RunAgentInput
from countersign.sdk import run

code = re.search(r"```python\\n(.*?)```", open(sys.argv[1]).read(), re.S).group(1)
namespace = {}
exec(compile(code, "docs/sdk.md", "exec"), namespace)

async def events(**fields):
    run_input = RunAgentInput(thread_id="t", run_id=fields.pop("run_id"), state={}, messages=[], tools=[],
                              context=[], forwarded_props={}, **fields)
    return [e.model_dump(mode="json", by_alias=True, exclude_none=True)
            async for e in run(namespace["Refunder"](signing_secret="css_x"), run_input)]

first = asyncio.run(events(run_id="r1"))
answer = {"interruptId": "approve-refund", "status": "resolved", "payload": {"approved": True}}
second = asyncio.run(events(run_id="r2", resume=[answer]))
print(json.dumps([first[-1], second[-1], [e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT"]]))
"""


def test_the_docs_example_runs_on_the_installed_sdk(sdk_python):
    done = subprocess.run([sdk_python, "-I", "-c", DRIVE_THE_EXAMPLE, ROOT / "docs" / "sdk.md"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "SIGNING_SECRET": "css_x"})
    assert done.returncode == 0, done.stderr
    paused, finished, said = json.loads(done.stdout)
    assert [i["id"] for i in paused["outcome"]["interrupts"]] == ["approve-refund"]
    assert finished["type"] == "RUN_FINISHED" and said == ["Refunded 30 EUR."]
