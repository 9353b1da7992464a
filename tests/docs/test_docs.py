"""The docs' examples run as written, their settings table is conf.py's, and their links resolve."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import AsyncClient
from django.urls import path

from interrupts import conf
from interrupts.demo.views import agent_view
from interrupts.management.commands import settings_table

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def section(doc: str, heading: str) -> str:
    """The text of ``heading``'s section of docs/<doc>, up to the next heading of its level or above."""
    level = len(heading.split(" ", 1)[0])
    lines = (DOCS / doc).read_text().split(heading + "\n", 1)[1].splitlines()
    fenced, kept = False, []
    for line in lines:
        fenced ^= line.startswith("```")
        if not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        kept.append(line)
    return "\n".join(kept)


def block(doc: str, heading: str, language: str) -> str:
    return re.search(rf"```{language}\n(.*?)```", section(doc, heading), re.S).group(1)


# --- docs/agents.md: the SDK example -------------------------------------------------


def documented_agent():
    namespace: dict = {}
    exec(compile(block("agents.md", "## Write an agent", "python"), "docs/agents.md", "exec"), namespace)
    return namespace["Refunder"]()


urlpatterns = [path("agents/refunder/", agent_view(documented_agent()))]


async def post(client, body) -> list[dict]:
    response = await client.post("/agents/refunder/", body, content_type="application/json")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    raw = b"".join([chunk async for chunk in response.streaming_content]).decode()
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: ")]


@pytest.mark.urls(__name__)
async def test_the_documented_agent_pauses_then_acts_on_the_answer():
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


# --- docs/api.md: the walkthrough against a served app -------------------------------


def test_the_api_walkthrough_runs_against_a_live_server(served):
    script = block("api.md", "## Through the API", "sh")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT,
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


# --- docs/audit.md: the offline chain verifier ---------------------------------------


@pytest.mark.django_db
def test_the_documented_command_verifies_a_real_chain_export_and_catches_an_edit(tmp_path, client):
    from interrupts.hub.trail import chain
    from interrupts.models import AuditEntry

    from .. import factories

    reviewer = factories.user(is_staff=True)
    for n in range(3):
        chain.record_decision(factories.decision(factories.interrupt(), reviewer, payload={"approved": n % 2 == 0}))
    # The commands the docs give a compliance officer, as written there: without and with agents' secrets.
    commands = [line.removeprefix("$ ").split() for line in section("audit.md", "## Checking an export offline")
                .splitlines() if line.startswith("$ python -m interrupts.verify_export")]
    assert len(commands) == 2 and "--secrets" in commands[1]
    client.force_login(reviewer)
    export, secrets = tmp_path / "trail.json", tmp_path / "secrets.json"
    export.write_bytes(b"".join(client.get("/api/audit/export/").streaming_content))
    secrets.write_text('{"deployer": "css_x"}')

    def run(command, path):
        # Without Django's settings: the check needs the file alone.
        files = {"trail.json": str(path), "secrets.json": str(secrets)}
        return subprocess.run([sys.executable, *(files.get(a, a) for a in command[1:])], capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin"}, cwd=ROOT)

    head = AuditEntry.objects.order_by("-seq").first()
    for command in commands:
        done = run(command, export)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == f"verified {head.seq} entries, head {head.seq}:{head.hash}"
    forged = tmp_path / "forged.json"
    forged.write_bytes(export.read_bytes().replace(b'\\"approved\\":false', b'\\"approved\\":true', 1))
    assert forged.read_bytes() != export.read_bytes()
    done = run(commands[0], forged)
    assert done.returncode == 1 and "DOES NOT VERIFY" in done.stdout and "was changed" in done.stdout


# --- docs/settings.md: generated from conf.py ----------------------------------------


def test_the_settings_table_is_the_one_conf_py_generates():
    text = settings_table.DOC.read_text()
    assert text == settings_table.with_table(text), (
        "docs/settings.md's settings table differs from interrupts/conf.py: "
        "run `.venv/bin/python manage.py settings_table --write`"
    )


def test_the_settings_table_names_every_setting_with_its_default():
    text = settings_table.DOC.read_text()
    for setting in conf.SETTINGS:
        assert f"| `{setting.name}` | {conf.shown(setting.default)} |" in text


def test_every_environment_variable_the_project_reads_is_documented():
    source = (ROOT / "project" / "settings.py").read_text()
    read = set(re.findall(r"""(?:os\.environ\.get|env_bool|env_list)\(\s*["']([A-Z_]+)["']""", source))
    assert {"DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL", "EMAIL_HOST"} <= read  # the pattern finds them
    text = settings_table.DOC.read_text()
    assert [name for name in sorted(read) if f"`{name}`" not in text] == []


def test_every_setting_the_docs_name_exists():
    named = set()
    for page in [ROOT / "README.md", ROOT / "SECURITY.md", *DOCS.rglob("*.md")]:
        named |= set(re.findall(r"\bCOUNTERSIGN_[A-Z_]*[A-Z]\b", page.read_text()))
    assert "COUNTERSIGN_MAX_STREAMS" in named  # the pattern finds them
    assert sorted(named - set(conf.DEFAULTS)) == []


def test_a_changed_default_makes_the_table_stale(monkeypatch):
    text = settings_table.DOC.read_text()
    first = conf.SETTINGS[0]
    monkeypatch.setattr(conf, "SETTINGS", (conf.Setting(first.name, 99.0, first.doc), *conf.SETTINGS[1:]))
    assert settings_table.with_table(text) != text


# --- Links ----------------------------------------------------------------------------

PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "SECURITY.md", *sorted(DOCS.rglob("*.md"))]


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def links(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+:", target):
            yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        goal = (page.parent / file).resolve() if file else page
        if not goal.exists():
            broken.append(target)
        elif anchor and goal.is_file() and anchor not in anchors(goal):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)} links to what is not there"


def test_the_index_links_every_document():
    index = (DOCS / "index.md").read_text()
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "index.md":
            assert f"]({page.name})" in index, f"docs/index.md does not link {page.name}"
    for page in sorted((DOCS / "internals").glob("*.md")):
        assert f"](internals/{page.name})" in index, f"docs/index.md does not link internals/{page.name}"
