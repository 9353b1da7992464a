"""The review pages server-side: what they show, what they refuse, what they escape."""

import csv
import io
import json

import pytest
from django.urls import reverse

from interrupts.models import Agent, Decision, Interrupt, Run
from interrupts.reads import selectors

from .. import factories as make

pytestmark = pytest.mark.django_db

EVIL = "<script>alert('x')</script>"
FILING_SCHEMA = {
    "type": "object",
    "properties": {"quarter": {"type": "string", "enum": ["Q1", "Q2"]}, "year": {"type": "integer", "minimum": 2000}},
    "required": ["quarter", "year"],
}
EDITS_SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"},
                   "editedArgs": {"type": "object", "properties": {"to": {"type": "string", "format": "email"}}}},
    "required": ["approved"],
}


@pytest.fixture
def reviewer(client):
    user = make.user(first_name="Rita", is_staff=True)
    client.force_login(user)
    return user


def htmx(client, url, data):
    return client.post(url, data, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="batch")


def test_the_inbox_groups_a_runs_interrupts_into_one_batch(client, reviewer):
    run = make.run(status="interrupted")
    for name in ("i-1", "i-2", "i-3"):
        make.interrupt(run, interrupt_id=name)
    make.interrupt()  # another run
    page = client.get(reverse("inbox")).content.decode()
    assert page.count('class="batch"') == 2
    assert "0 of 3 decided" in page


@pytest.mark.parametrize("params, shown", [
    ({"agent": "alpha"}, ["a-1"]), ({"reason": "tool_call"}, ["b-1"]), ({"q": "budget"}, ["a-1"]),
    ({"sort": "newest"}, ["b-1", "a-1"]), ({}, ["a-1", "b-1"]),
])
def test_inbox_filters_search_and_sort(client, reviewer, params, shown):
    alpha, beta = make.agent(name="alpha"), make.agent(name="beta")
    make.interrupt(make.run(make.thread(agent=alpha)), interrupt_id="a-1", message="Approve the budget")
    make.interrupt(make.run(make.thread(agent=beta)), interrupt_id="b-1", reason="tool_call")
    page = client.get(reverse("inbox"), params).content.decode()
    found = [name for name in ("a-1", "b-1") if f'data-interrupt-id="{name}"' in page]
    assert sorted(found, key=lambda name: page.index(f'data-interrupt-id="{name}"')) == shown


def test_an_htmx_answer_that_breaks_the_schema_shows_errors_by_field(client, reviewer):
    interrupt = make.interrupt(interrupt_id="f-1", reason="input_required", response_schema=FILING_SCHEMA,
                               raw={"id": "f-1", "reason": "input_required", "responseSchema": FILING_SCHEMA})
    response = htmx(client, reverse("decide", args=[interrupt.pk]),
                    {"action": "respond", "payload": json.dumps({"quarter": "Q9", "year": 1999})})
    page = response.content.decode()
    assert response.status_code == 200 and 'data-testid="card-error"' in page
    assert 'data-path="/quarter"' in page and 'data-path="/year"' in page
    assert Interrupt.objects.get(pk=interrupt.pk).status == "pending"


def test_an_htmx_answer_that_fits_is_recorded_and_the_batch_links_the_resume(client, reviewer):
    interrupt = make.interrupt(interrupt_id="f-1", reason="input_required", response_schema=FILING_SCHEMA,
                               raw={"id": "f-1", "reason": "input_required", "responseSchema": FILING_SCHEMA})
    response = htmx(client, reverse("decide", args=[interrupt.pk]),
                    {"action": "respond", "payload": json.dumps({"quarter": "Q1", "year": 2026})})
    resume = Run.objects.get(parent=interrupt.run)
    assert 'data-testid="resumed-run"' in response.content.decode()
    assert resume.run_id in response.content.decode()
    assert Decision.objects.get(interrupt=interrupt).user == reviewer


def test_malformed_json_is_a_form_error_not_a_500(client, reviewer):
    interrupt = make.interrupt(interrupt_id="f-1", reason="input_required", response_schema=FILING_SCHEMA,
                               raw={"id": "f-1", "reason": "input_required", "responseSchema": FILING_SCHEMA})
    response = htmx(client, reverse("decide", args=[interrupt.pk]), {"action": "respond", "payload": "{oops"})
    assert response.status_code == 200
    assert "not valid JSON" in response.content.decode()


def test_without_javascript_a_decision_redirects_back_with_a_message(client, reviewer):
    interrupt = make.interrupt()
    response = client.post(reverse("decide", args=[interrupt.pk]), {"action": "approve", "next": "/inbox/?q=x"},
                           follow=True)
    assert response.redirect_chain[0][0] == "/inbox/?q=x"
    assert f"Decision recorded for {interrupt.interrupt_id}" in response.content.decode()


def test_next_never_redirects_off_site(client, reviewer):
    interrupt = make.interrupt()
    response = client.post(reverse("decide", args=[interrupt.pk]), {"action": "approve", "next": "https://evil.example/"})
    assert response["Location"] == reverse("inbox")


def test_the_edit_preview_diffs_proposed_and_edited_args(client, reviewer):
    interrupt = make.interrupt(
        interrupt_id="e-1",
        reason="tool_call",
        tool_call_id="tc-1",
        proposed_args={"to": "a@b.com"},
        response_schema=EDITS_SCHEMA,
        raw={"id": "e-1", "reason": "tool_call", "toolCallId": "tc-1", "responseSchema": EDITS_SCHEMA},
    )
    good = client.post(
        reverse("edit-preview", args=[interrupt.pk]), {"edited_args": '{"to": "c@d.com"}'}
    ).content.decode()
    assert 'data-testid="edit-diff"' in good and 'class="diff"' in good
    assert (
        '<del><span class="sr">removed: </span>a@b.com</del><ins><span class="sr">added: </span>c@d.com</ins>' in good
    )
    assert 'value="{&quot;to&quot;: &quot;c@d.com&quot;}"' in good  # what the final click sends
    bad = client.post(reverse("edit-preview", args=[interrupt.pk]), {"edited_args": '{"to": "nope"}'}).content.decode()
    assert 'data-testid="preview-error"' in bad and "/editedArgs/to" in bad
    not_object = client.post(reverse("edit-preview", args=[interrupt.pk]), {"edited_args": "[1]"}).content.decode()
    assert "must be a JSON object" in not_object


@pytest.mark.parametrize("edits, code_words", [
    ({"type": "object", "$ref": "https://agent.example/edits.json"}, "points outside the schema"),
    ({"type": "object", "properties": {"to": {"type": "string", "pattern": "^(?=a)a$"}}}, "RE2"),
])
def test_the_edit_preview_says_why_an_unusable_schema_cannot_check_edits(client, reviewer, edits, code_words):
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}, "editedArgs": edits}}
    interrupt = make.interrupt(interrupt_id="e-2", reason="tool_call", tool_call_id="tc-1", proposed_args={"to": "a"},
                               response_schema=schema,
                               raw={"id": "e-2", "reason": "tool_call", "toolCallId": "tc-1", "responseSchema": schema})
    response = client.post(reverse("edit-preview", args=[interrupt.pk]), {"edited_args": '{"to": "a"}'})
    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-testid="preview-error"' in page and code_words in page
    assert 'data-testid="edit-diff"' not in page


def test_c28_agent_supplied_markup_is_escaped_on_every_page(client, reviewer):
    agent = make.agent(name="evil", description=EVIL)
    thread = make.thread(agent=agent, title=EVIL)
    run = make.run(thread, status="interrupted")
    make.event(
        run, 1, type="TOOL_CALL_START", payload={"type": "TOOL_CALL_START", "toolCallId": "tc", "toolCallName": EVIL}
    )
    make.event(
        run,
        2,
        type="TOOL_CALL_ARGS",
        payload={"type": "TOOL_CALL_ARGS", "toolCallId": "tc", "delta": json.dumps({"x": EVIL})},
    )
    make.event(run, 3, type="STATE_SNAPSHOT", payload={"type": "STATE_SNAPSHOT", "snapshot": {EVIL: EVIL}})
    interrupt = make.interrupt(run, reason=EVIL, message=EVIL, tool_call_id="tc", tool_name=EVIL,
                               proposed_args={"x": EVIL}, metadata={EVIL: EVIL})
    make.decision(make.interrupt(run, interrupt_id="decided", message=EVIL, status="resolved"), reviewer,
                  payload={"note": EVIL}, comment=EVIL)
    for url in (reverse("inbox"), reverse("thread", args=[thread.thread_id]), reverse("threads"), reverse("audit"),
                reverse("agents"), reverse("thread-events", args=[thread.thread_id])):
        page = client.get(url).content.decode()
        assert EVIL not in page, url
        assert "&lt;script&gt;" in page, url
    assert interrupt.pk


def test_the_thread_page_disables_start_while_decisions_are_pending(client, reviewer):
    run = make.run(status="interrupted")
    make.interrupt(run, interrupt_id="wait-for-me")
    page = client.get(reverse("thread", args=[run.thread.thread_id])).content.decode()
    assert 'Waiting for decisions on <span data-pending-list title="wait-for-me">1 request</span>' in page
    assert 'type="submit" disabled' in page
    refused = client.post(reverse("start-run", args=[run.thread.thread_id]), {"message": "go"}, follow=True)
    assert "wait-for-me" in refused.content.decode()
    assert Run.objects.filter(thread=run.thread).count() == 1


def test_thread_events_after_a_sequence_say_where_they_reach(client, reviewer):
    run = make.run()
    for seq in (1, 2, 3):
        make.event(run, seq)
    response = client.get(reverse("thread-events", args=[run.thread.thread_id]), {"after": 1})
    assert response["X-Last-Seq"] == "3" and response["X-Pending"] == "0"
    assert response.content.decode().count('class="run-start"') == 2


def audited(reviewer):
    run = make.run(status="interrupted")
    interrupt = make.interrupt(run, reason="tool_call", tool_call_id="tc-9", tool_name="sendEmail",
                               proposed_args={"to": "a@b.com"}, status="resolved", message='=HYPERLINK("x")')
    make.decision(interrupt, reviewer, payload={"approved": True, "editedArgs": {"to": "c@d.com"}},
                  edited_args={"to": "c@d.com"})
    resume = make.run(run.thread, parent=run, resume_key="k1", status="succeeded")
    make.event(
        resume,
        1,
        type="TOOL_CALL_RESULT",
        payload={"type": "TOOL_CALL_RESULT", "toolCallId": "tc-9", "messageId": "m", "content": "sent to c@d.com"},
    )
    return interrupt, resume


def test_the_audit_trail_shows_proposal_decision_and_result(client, reviewer):
    interrupt, resume = audited(reviewer)
    page = client.get(reverse("audit")).content.decode()
    assert page.count('data-testid="audit-row"') == 1
    assert "sendEmail" in page and "Rita" in page and 'class="diff"' in page and "sent to c@d.com" in page
    assert client.get(reverse("audit"), {"user": "nobody"}).content.decode().count('data-testid="audit-row"') == 0
    assert client.get(reverse("audit"), {"outcome": "expired"}).content.decode().count('data-testid="audit-row"') == 0
    per_thread = client.get(reverse("thread-audit", args=[interrupt.run.thread.thread_id])).content.decode()
    assert per_thread.count('data-testid="audit-row"') == 1


def test_the_audit_trail_exports_csv_and_json(client, reviewer):
    interrupt, resume = audited(reviewer)
    exported = b"".join(client.get(reverse("audit"), {"format": "json"}).streaming_content)
    [row] = json.loads(exported)
    assert row["proposedArgs"] == {"to": "a@b.com"} and row["editedArgs"] == {"to": "c@d.com"}
    assert row["decidedBy"] == reviewer.username and row["results"] == ["sent to c@d.com"]
    assert row["resumedRun"] == resume.run_id
    text = b"".join(client.get(reverse("audit"), {"format": "csv"}).streaming_content).decode()
    [record] = list(csv.DictReader(io.StringIO(text)))
    assert record["interruptId"] == interrupt.interrupt_id
    # A spreadsheet must not run agent text as a formula.
    assert record["message"].startswith("'=")


def test_only_staff_register_agents(client):
    client.force_login(make.user())
    assert client.get(reverse("agent-add")).status_code == 302
    client.force_login(make.user(is_staff=True))
    response = client.post(reverse("agent-add"), {"name": "ext", "url": "http://127.0.0.1:9/x/", "description": "",
                                                  "auth_header": "", "auth_value": "", "capabilities": "{}"})
    # Registered: the page shows its signing secret, once, instead of redirecting.
    assert response.status_code == 200
    assert Agent.objects.get(name="ext").signing_secret in response.content.decode()
    assert "ext" in client.get(reverse("agents")).content.decode()


def test_the_unfiltered_inbox_counts_pending_interrupts_once(client, reviewer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for _ in range(3):
        make.interrupt()
    with CaptureQueriesContext(connection) as unfiltered:
        page = client.get(reverse("inbox"))
    assert page.status_code == 200
    counts = [q["sql"] for q in unfiltered.captured_queries if "COUNT(" in q["sql"].upper()]
    assert len(counts) == 1, counts
    assert page.context["pending_count"] == selectors.Counted(3)
    # Filtered, the header still counts every pending interrupt.
    with CaptureQueriesContext(connection) as filtered:
        page = client.get(reverse("inbox"), {"reason": "nothing-matches"})
    assert page.context["pending_count"] == selectors.Counted(3)
    assert len([q for q in filtered.captured_queries if "COUNT(" in q["sql"].upper()]) == 2


@pytest.mark.parametrize("payload, words", [('{"note": "\\ud800"}', "lone UTF-16 surrogate"),
                                            ("[" * 100_000, "not valid JSON")])
def test_an_answer_that_cannot_be_kept_is_a_form_error_and_nothing_is_stored(client, reviewer, payload, words):
    interrupt = make.interrupt(response_schema={"type": "object"}, raw={"id": "f-1", "reason": "input_required",
                                                                         "responseSchema": {"type": "object"}},
                               interrupt_id="f-1", reason="input_required")
    response = htmx(client, reverse("decide", args=[interrupt.pk]), {"action": "respond", "payload": payload})
    assert response.status_code == 200
    assert words in response.content.decode()
    assert not Decision.objects.exists()
