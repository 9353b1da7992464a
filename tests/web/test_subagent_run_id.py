"""subagentRunId (AG-UI Interrupt): which subagent's run raised an interrupt, shown wherever the interrupt is.

The agent's own text: escaped, cut on pages past a sane length, never a
link; whole in the API and the audit export; and never part of what the
audit chain hashes beyond the digest of the interrupt as sent.
"""

import csv
import io
import json
import re

import pytest
from django.urls import reverse

from interrupts.hub import decisions, events, outcomes
from interrupts.hub.trail import content as trail_content
from interrupts.hub.trail import verify
from interrupts.models import AuditEntry, Interrupt

from .. import factories as make

pytestmark = pytest.mark.django_db

EVIL = "<script>alert('sub')</script>"
# Longer than any page shows whole, and hostile: markup, and a spreadsheet formula.
LONG = "=HYPERLINK(\"http://evil.example\")" + EVIL + "x" * 300
PLAIN = "sub-researcher-7"


@pytest.fixture
def reviewer(client):
    user = make.user(first_name="Rita", is_staff=True)
    client.force_login(user)
    return user


def raised(subagents: list[str | None]):
    """A run that raised one interrupt per entry of ``subagents`` (with that subagentRunId, or none), as recorded."""
    run = make.run(status="streaming")
    items = []
    for n, subagent in enumerate(subagents):
        item = {"id": f"i-{n}", "reason": "confirmation", "message": f"Go on {n}?"}
        if subagent is not None:
            item["subagentRunId"] = subagent
        items.append(item)
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
                "outcome": {"type": "interrupt", "interrupts": items}}
    events.append_many(run, [terminal])
    outcomes.finish(run, terminal)
    return run, list(Interrupt.objects.filter(run=run).order_by("pk"))


def no_link_to(page: str, text: str) -> None:
    for href in re.findall(r'href="([^"]*)"', page):
        assert text not in href and "evil.example" not in href


def test_the_inbox_card_names_the_subagent_escaped_and_cut(client, reviewer):
    _run, (plain, long, root) = raised([PLAIN, LONG, None])
    make.every_card_whole(client)
    page = client.get(reverse("inbox"), {"scope": "all"}).content.decode()
    cards = {m.group(1): m.group(0) for m in re.finditer(
        r'<article[^>]*data-interrupt-id="([^"]+)".*?</article>', page, re.S)}
    assert f"asked by one of its subagents (run <code title=\"{PLAIN}\">{PLAIN}</code>)" in cards["i-0"]
    assert EVIL not in page and "&lt;script&gt;" in cards["i-1"]
    [shown] = re.findall(r'data-testid="subagent">asked by one of its subagents \(run <code[^>]*>([^<]*)</code>',
                         cards["i-1"])
    assert shown.endswith("…") and len(shown) < 100  # escaped entities make it longer than 40, never 300
    # The root agent raised the third: nothing is said about a subagent.
    assert 'data-testid="subagent"' not in cards["i-2"]
    no_link_to(page, "HYPERLINK")


def test_the_api_gives_the_subagent_run_id_whole_or_null(client, reviewer):
    _run, (plain, long, root) = raised([PLAIN, LONG, None])
    listed = client.get("/api/interrupts/", {"status": "all"}).json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    by_id = {row["interrupt_id"]: row["subagent_run_id"] for row in rows}
    assert by_id == {"i-0": PLAIN, "i-1": LONG, "i-2": None}
    assert client.get(f"/api/interrupts/{long.pk}/").json()["subagent_run_id"] == LONG


def decided(reviewer, subagents):
    run, rows = raised(subagents)
    for row in rows:
        decisions.decide(row, reviewer, "resolved", {"approved": True})
    return run, rows


def test_the_audit_page_and_thread_page_name_the_subagent_escaped_and_cut(client, reviewer):
    run, _rows = decided(reviewer, [PLAIN, LONG])
    audit = client.get(reverse("audit")).content.decode()
    assert audit.count('data-testid="audit-row"') == 2
    assert f'data-testid="audit-subagent">asked by one of its subagents (run <code title="{PLAIN}">{PLAIN}</code>)' \
        in audit
    [shown] = re.findall(r'data-testid="audit-subagent">asked by one of its subagents \(run <code[^>]*>([^<]*)</code>',
                         audit.replace(
        f"<code title=\"{PLAIN}\">{PLAIN}", ""))
    assert shown.endswith("…") and EVIL not in audit and "&lt;script&gt;" in audit
    no_link_to(audit, "HYPERLINK")

    thread = client.get(reverse("thread", args=[run.thread.thread_id])).content.decode()
    [end] = re.findall(r'<div class="run-end.*?</div>', thread, re.S)
    assert f"<code>i-0</code> <span data-testid=\"subagent\">(asked by one of its subagents (run " \
           f"<code title=\"{PLAIN}\">{PLAIN}</code>))</span>" in end
    assert "<code>i-1</code> <span data-testid=\"subagent\">" in end and "…" in end
    assert EVIL not in thread
    no_link_to(thread, "HYPERLINK")
    # Live updates render the same slice of history.
    events = client.get(reverse("thread-events", args=[run.thread.thread_id])).content.decode()
    assert f"{PLAIN}</code>))</span>" in events and EVIL not in events


def test_the_audit_export_carries_the_subagent_run_id_whole_and_formula_safe(client, reviewer):
    decided(reviewer, [PLAIN, LONG, None])
    exported = json.loads(b"".join(client.get(reverse("audit"), {"format": "json"}).streaming_content))
    assert {row["interruptId"]: row["subagentRunId"] for row in exported} == {"i-0": PLAIN, "i-1": LONG,
                                                                             "i-2": None}
    text = b"".join(client.get(reverse("audit"), {"format": "csv"}).streaming_content).decode()
    records = {r["interruptId"]: r["subagentRunId"] for r in csv.DictReader(io.StringIO(text))}
    # A spreadsheet must not run the agent's text as a formula.
    assert records == {"i-0": PLAIN, "i-1": "'" + LONG, "i-2": ""}


def test_the_audit_chain_holds_the_subagent_the_reviewer_was_shown(reviewer):
    # The entry names the subagent as the card did, besides the
    # digest of the interrupt as sent; entries written before verify by the keys
    # they hold (tests/e2e/test_trail_anchor.py).
    _run, rows = decided(reviewer, [PLAIN])
    [entry] = AuditEntry.objects.filter(interrupt=rows[0])
    content = json.loads(entry.content)["data"]
    assert content["subagent"] == {"runId": PLAIN, "name": None}
    assert content["rawDigest"] == trail_content.value_digest(rows[0].raw)
    assert not verify.verify(save=False).problems
