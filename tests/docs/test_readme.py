"""The README's SDK example runs as written, served through the real view."""

import json
import re
from pathlib import Path

import pytest
from django.test import AsyncClient
from django.urls import path

from interrupts.sdk.views import agent_view

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def readme_agent():
    section = README.split("## Write an agent", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace["Refunder"]()


urlpatterns = [path("agents/refunder/", agent_view(readme_agent()))]


async def post(client, body) -> list[dict]:
    response = await client.post("/agents/refunder/", body, content_type="application/json")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    raw = b"".join([chunk async for chunk in response.streaming_content]).decode()
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]


@pytest.mark.urls(__name__)
async def test_the_readme_agent_pauses_then_acts_on_the_answer():
    client = AsyncClient()
    first = await post(client, {"threadId": "t", "runId": "r1", "messages": []})
    assert first[-1]["outcome"]["interrupts"][0]["id"] == "approve-refund"
    assert first[-1]["outcome"]["interrupts"][0]["message"] == "Refund 30 EUR for order 1234?"
    resume = {"interruptId": "approve-refund", "status": "resolved", "payload": {"approved": True}}
    second = await post(client, {"threadId": "t", "runId": "r2", "messages": [], "resume": [resume]})
    assert [e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["Refunded 30 EUR."]
    bad = {**resume, "payload": {"approved": "yes"}}
    third = await post(client, {"threadId": "t", "runId": "r3", "messages": [], "resume": [bad]})
    assert third[-1]["type"] == "RUN_ERROR" and third[-1]["code"] == "INVALID_RESUME"


def test_the_readme_api_walkthrough_runs_against_a_live_server(served):
    import os
    import subprocess

    section = README.split("## Through the API", 1)[1]
    script = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60,
        env={**os.environ, "BASE": served.url, "TOKEN": served.token},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    proposed, decided, results = lines[0], lines[1], lines[-1]
    assert "sendEmail" in proposed and "c@d.com" in proposed and "True" in proposed
    assert decided.startswith("resolved") and "Tuesday?" in decided
    # The result answers the very tool call proposed in step 1.
    proposed_call = re.search(r"'(tc-[0-9a-f]+)'", proposed).group(1)
    assert re.search(r"'(tc-[0-9a-f]+)'", results).group(1) == proposed_call
    assert '"sent": true' in results and "Tuesday?" in results


@pytest.mark.django_db
def test_the_readme_script_verifies_a_real_chain_export_and_catches_an_edit(tmp_path, client):
    import subprocess
    import sys

    from interrupts.hub import trail
    from interrupts.models import AuditEntry

    from .. import factories

    reviewer = factories.user(is_staff=True)
    for n in range(3):
        trail.record_decision(factories.decision(factories.interrupt(), reviewer, payload={"approved": n % 2 == 0}))
    section = README.split("## Verifying the audit trail", 1)[1]
    script = tmp_path / "verify_chain.py"
    script.write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    client.force_login(reviewer)
    export = tmp_path / "chain.jsonl"
    export.write_bytes(b"".join(client.get("/audit/?format=chain").streaming_content))

    def run(path):
        # A bare interpreter: the script needs nothing but the standard library.
        return subprocess.run([sys.executable, "-I", str(script), str(path)], capture_output=True, text=True)

    done = run(export)
    head = AuditEntry.objects.order_by("-seq").first()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"verified {head.seq} entries, head {head.hash}"
    lines = export.read_text().splitlines()
    at = next(n for n, line in enumerate(lines) if '\\"approved\\":false' in line)
    lines[at] = lines[at].replace('\\"approved\\":false', '\\"approved\\":true')
    forged = tmp_path / "forged.jsonl"
    forged.write_text("\n".join(lines) + "\n")
    done = run(forged)
    assert done.returncode == 1 and done.stderr.strip() == f"entry {at + 1} was edited"
