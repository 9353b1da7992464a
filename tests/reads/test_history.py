"""The thread's history as a person reads it: decisions where they happened, results naming their tool,
state shown once and then as what changed; the live slices say the same as the whole page, at a fixed cost."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from interrupts.models import Decision, Interrupt, Run
from interrupts.reads import history

from .. import factories as make

APPROVAL = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


def ev(seq, kind, run_id="r1", from_agent=True, **payload):
    return (seq, kind, {"type": kind, **payload}, run_id, from_agent)


def kinds(items):
    return [item.kind for item in items]


# --- pure: fold ------------------------------------------------------------------------------


def test_a_tool_result_names_the_tool_whose_call_it_answers():
    items = history.fold([
        ev(1, "TOOL_CALL_START", toolCallId="tc-1", toolCallName="sendEmail"),
        ev(2, "TOOL_CALL_ARGS", toolCallId="tc-1", delta='{"to": "a@b.com"}'),
        ev(3, "TOOL_CALL_END", toolCallId="tc-1"),
        # The resumed run answers a call of the run before it; a snapshot names another call.
        ev(4, "MESSAGES_SNAPSHOT", "r2", messages=[{"id": "m", "role": "assistant", "toolCalls": [
            {"id": "tc-2", "type": "function", "function": {"name": "deleteRepo", "arguments": "{}"}}]}]),
        ev(5, "TOOL_CALL_RESULT", "r2", toolCallId="tc-1", messageId="m1", content='{"sent": true}'),
        ev(6, "TOOL_CALL_RESULT", "r2", toolCallId="tc-2", messageId="m2", content="gone"),
        ev(7, "TOOL_CALL_RESULT", "r2", toolCallId="tc-3", messageId="m3", content="?"),
        ev(8, "TOOL_CALL_RESULT", "r2", toolCallId="tc-0", messageId="m4", content="?"),
    ], calls={"tc-0": "earlier"})
    results = [item for item in items if item.kind == "tool-result"]
    assert [r.data["name"] for r in results] == ["sendEmail", "deleteRepo", "", "earlier"]
    assert results[0].data["content"] == '{\n  "sent": true\n}'


def test_state_is_shown_once_then_as_what_changed_and_an_identical_repeat_is_collapsed():
    first = {"count": 1, "emails": {"tc-1": {"status": "proposed", "to": "a@b.com"}}, "gone": [1, 2]}
    second = {"count": 2, "emails": {"tc-1": {"status": "sent", "to": "a@b.com"}}, "new": True}
    items = history.fold([
        ev(1, "STATE_SNAPSHOT", snapshot=first),
        ev(2, "STATE_SNAPSHOT", snapshot=first),
        ev(3, "STATE_SNAPSHOT", "r2", snapshot=second),
        ev(4, "STATE_DELTA", "r2", delta=[{"op": "replace", "path": "/count", "value": 3},
                                          {"op": "remove", "path": "/new"},
                                          {"op": "move", "from": "/count", "path": "/total"}]),
        ev(5, "STATE_SNAPSHOT", "r2", snapshot={"emails": second["emails"], "total": 3}),
    ])
    whole, repeat, changed, delta, after_delta = items
    assert whole.data["snapshot"] == first and whole.data["keys"] == 3 and "changes" not in whole.data
    assert repeat.data == {"repeat": True}
    assert changed.data["changed"] == 4 and changed.data["more"] == 0
    assert changed.data["changes"] == [
        {"op": "changed", "path": "/count", "before": "1", "after": "2"},
        {"op": "changed", "path": "/emails/tc-1/status", "before": "proposed", "after": "sent"},
        {"op": "added", "path": "/new", "after": "true"},
        {"op": "removed", "path": "/gone", "before": "[1, 2]"},
    ]
    assert delta.data["words"] == ["set /count to 3", "removed /new", "moved /count to /total"]
    assert history.delta_words([{"op": "add", "path": "/list/-", "value": {"a": 1}}, {"op": "copy", "from": "/a",
                                 "path": "/b"}, "x"]) == ["added /list/- = {\"a\": 1}", "copied /a to /b",
                                                          "an operation that is not an object"]
    # The deltas were followed: the next snapshot is what they made, so nothing changed.
    assert after_delta.data == {"repeat": True}


def test_state_changes_escape_pointers_and_compare_json_not_python():
    assert history.state_changes({"a/b": 1, "t": True}, {"a/b": 1, "t": 1}) == [
        {"op": "changed", "path": "/t", "before": "true", "after": "1"}]
    assert history.state_changes({"a/b": [1]}, {"a/b": [1, 2]}) == [{"op": "added", "path": "/a~1b/1", "after": "2"}]
    deep = current = {}
    for _ in range(5000):  # deeper than Python's recursion allows
        current["k"] = {}
        current = current["k"]
    assert len(history.state_changes(deep, {"k": 1})) == 1


def test_a_large_state_is_shown_whole_not_compared():
    big = {"blob": "x" * (history.STATE_COMPARED_BYTES + 1)}
    items = history.fold([ev(1, "STATE_SNAPSHOT", snapshot=big), ev(2, "STATE_SNAPSHOT", snapshot=big)])
    assert [("changes" in item.data, item.data.get("snapshot") is big) for item in items] == [(False, True)] * 2


def test_each_runs_decisions_follow_its_end_before_the_resumed_run_starts():
    decided = {"r1": history.Item("decisions", 0, "r1", key="r1", data={"entries": [], "version": "1"})}
    items = history.fold([
        ev(1, "RUN_STARTED"),
        ev(2, "RUN_FINISHED", outcome={"type": "interrupt", "interrupts": [{"id": "i-1"}]}),
        ev(3, "RUN_STARTED", "r2", parentRunId="r1"),
        ev(4, "RUN_FINISHED", "r2", outcome={"type": "success"}),
    ], decided=decided)
    assert kinds(items) == ["run-start", "run-end", "decisions", "run-start", "run-end"]


# --- from the database -----------------------------------------------------------------------


def paused_and_resumed(reviewer, colleague):
    """A run that proposed sendEmail and paused on two interrupts; both decided (one after an undo); resumed."""
    run = make.run(status="interrupted", run_id="r1")
    thread = run.thread
    make.event(run, 1)
    make.event(run, 2, type="TOOL_CALL_START",
               payload={"type": "TOOL_CALL_START", "toolCallId": "tc-1", "toolCallName": "sendEmail"})
    make.event(run, 3, type="STATE_SNAPSHOT", payload={"type": "STATE_SNAPSHOT", "snapshot": {"n": 1}})
    make.event(run, 4, type="RUN_FINISHED", payload={
        "type": "RUN_FINISHED", "threadId": thread.thread_id, "runId": "r1",
        "outcome": {"type": "interrupt", "interrupts": [{"id": "approve-tc-1"}, {"id": "deploy"}]}})
    email = make.interrupt(run, interrupt_id="approve-tc-1", reason="tool_call", tool_call_id="tc-1",
                           tool_name="sendEmail", message="", status="resolved", response_schema=APPROVAL)
    deploy = make.interrupt(run, interrupt_id="deploy", message="Deploy build 42\n to   production?",
                            status="resolved")
    now = timezone.now()
    make.decision(email, reviewer, payload={"approved": True}, action="approve", comment="first thought",
                  superseded_at=now)
    make.decision(email, reviewer, payload={"approved": False}, action="reject", comment="not to them <b>")
    make.decision(deploy, colleague, payload={"build": 42}, action="respond", comment="")
    resume = make.run(thread, run_id="r2", parent=run, resume_key="k", status="succeeded")
    make.event(resume, 5, payload={"type": "RUN_STARTED", "threadId": thread.thread_id, "runId": "r2",
                                   "parentRunId": "r1"})
    make.event(resume, 6, type="TOOL_CALL_RESULT", payload={
        "type": "TOOL_CALL_RESULT", "toolCallId": "tc-1", "messageId": "m", "content": "skipped"})
    make.event(resume, 7, type="STATE_SNAPSHOT", payload={"type": "STATE_SNAPSHOT", "snapshot": {"n": 2}})
    make.event(resume, 8, type="RUN_FINISHED", payload={"type": "RUN_FINISHED", "threadId": thread.thread_id,
                                                        "runId": "r2", "outcome": {"type": "success"}})
    return thread


@pytest.mark.django_db
def test_the_page_shows_who_decided_what_with_the_comment_and_withdrawn_ones_marked():
    reviewer, colleague = make.user(first_name="Rita"), make.user(username="colleague")
    thread = paused_and_resumed(reviewer, colleague)
    shown = history.page(thread, limit=100)
    assert kinds(shown.items) == ["run-start", "tool-call", "state", "run-end", "decisions", "run-start",
                                  "tool-result", "state", "run-end"]
    decisions = shown.items[4]
    assert [(e["words"], e["who"], e["interrupt"], e["comment"], bool(e["withdrawn_at"]))
            for e in decisions.data["entries"]] == [
        ("Approved", "Rita", "approve-tc-1", "first thought", True),
        ("Rejected", "Rita", "approve-tc-1", "not to them <b>", False),
        ("Answered", "colleague", "deploy", "", False),
    ]
    assert decisions.data["entries"][2]["answer"] == '{"build": 42}'
    # Each named in words, for the page (its id goes in a tooltip).
    assert [e["label"] for e in decisions.data["entries"]] == [
        "the sendEmail call", "the sendEmail call", "Deploy build 42 to production?"]
    assert shown.pending == []
    assert shown.items[6].data["name"] == "sendEmail"
    assert shown.items[7].data["changes"] == [{"op": "changed", "path": "/n", "before": "1", "after": "2"}]


@pytest.mark.django_db
def test_an_expired_interrupt_and_one_still_waiting_say_so():
    run = make.run(status="interrupted", run_id="r1")
    make.event(run, 1, type="RUN_FINISHED", payload={"type": "RUN_FINISHED", "outcome": {
        "type": "interrupt", "interrupts": [{"id": "late"}, {"id": "open"}]}})
    make.interrupt(run, interrupt_id="late", status="expired", closed_at=timezone.now() - timedelta(minutes=3),
                   closed_reason="expired at its expiresAt")
    make.interrupt(run, interrupt_id="open")
    shown = history.page(run.thread, limit=100)
    entries = shown.items[1].data["entries"]
    assert [(e["words"], e["comment"], bool(e["at"])) for e in entries] == [
        ("Expired", "expired at its expiresAt", True), ("Waiting", "", False)]
    assert shown.pending == ["open"]


@pytest.mark.django_db
def test_a_live_slice_names_earlier_tools_compares_with_earlier_state_and_brings_the_paused_runs_decisions():
    reviewer, colleague = make.user(), make.user()
    thread = paused_and_resumed(reviewer, colleague)
    live = history.since(thread, 4, limit=100)
    assert kinds(live.items) == ["run-start", "tool-result", "state", "run-end", "decisions"]
    assert live.items[1].data["name"] == "sendEmail"  # its call is in an earlier slice
    assert live.items[2].data["changes"][0]["path"] == "/n"
    assert live.last_seq == 8
    # Nothing new: still the latest paused run's decisions (they may have changed), nothing else.
    assert kinds(history.since(thread, 8, limit=100).items) == ["decisions"]


@pytest.mark.django_db
def test_the_thread_page_and_its_live_reads_say_where_each_run_stands(client):
    reviewer = make.user(first_name="Rita", is_staff=True)
    client.force_login(reviewer)
    thread = paused_and_resumed(reviewer, make.user())
    waiting = make.run(thread, run_id="r3", status="interrupted")
    make.event(waiting, 9, type="RUN_FINISHED", payload={"type": "RUN_FINISHED", "outcome": {
        "type": "interrupt", "interrupts": [{"id": "a"}, {"id": "b"}]}})
    make.interrupt(waiting, interrupt_id="a")
    make.interrupt(waiting, interrupt_id="b")
    make.run(thread, run_id="r4", status="queued", attempts=2)
    page = client.get(reverse("thread", args=[thread.thread_id])).content.decode()
    statuses = re.findall(r'data-testid="run-status">([^<]*)<', page)
    assert statuses == [
        "paused, decided",
        "finished",
        "paused for 2 decisions",
        "waiting for the agent (attempt 2 failed)",
    ]
    assert "not to them &lt;b&gt;" in page and "<b>" not in page
    assert re.search(r'<del>Approved</del></span> by <strong class="by">Rita</strong>.*?just now</time>\s*'
                     r'<span class="withdrawn-note" data-testid="withdrawn">withdrawn', page, re.S)
    assert 'result of <code class="tool-name" data-testid="result-tool">sendEmail</code>' in page
    live = client.get(reverse("thread-events", args=[thread.thread_id]), {"after": 9}).content.decode()
    assert re.findall(r'data-testid="run-status">([^<]*)<', live) == statuses
    assert 'data-decisions="r3"' in live and "data-seq" not in live


def world(runs: int):
    """A thread of ``runs`` paused runs, each with a tool call, state, two decisions (one withdrawn) and a resume."""
    reviewer = make.user()
    thread = make.thread()
    seq = 0
    parent = None
    for n in range(runs):
        run = make.run(thread, status="interrupted", parent=parent)
        for kind, payload in (("RUN_STARTED", {}),
                              ("TOOL_CALL_START", {"toolCallId": f"tc-{n}", "toolCallName": "send"}),
                              ("STATE_SNAPSHOT", {"snapshot": {"n": n}}),
                              ("STATE_DELTA", {"delta": [{"op": "add", "path": "/m", "value": n}]}),
                              ("TOOL_CALL_RESULT", {"toolCallId": f"tc-{max(n - 1, 0)}", "content": "ok"}),
                              ("RUN_FINISHED", {"outcome": {"type": "interrupt", "interrupts": [{"id": f"i-{n}"}]}})):
            seq += 1
            make.event(run, seq, type=kind, payload={"type": kind, **payload})
        interrupt = make.interrupt(run, interrupt_id=f"i-{n}", status="resolved")
        make.decision(interrupt, reviewer, payload={"approved": True}, superseded_at=timezone.now())
        make.decision(interrupt, reviewer, payload={"approved": False}, comment="no")
        parent = run
    return reviewer, thread, seq


@pytest.mark.django_db
@pytest.mark.parametrize("read", ["page", "live"])
def test_reading_the_history_costs_the_same_queries_for_3_runs_and_for_30(client, read):
    counts = []
    for size in (3, 30):
        reviewer, thread, last = world(size)
        client.force_login(reviewer)
        url = reverse("thread", args=[thread.thread_id]) if read == "page" else reverse(
            "thread-events", args=[thread.thread_id])
        params = {} if read == "page" else {"after": 2}  # a slice that continues calls and state begun before it
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url, params)
        assert response.status_code == 200
        body = response.content.decode()
        assert body.count('data-testid="decision"') == 2 * size  # each run's two, the withdrawn one too
        counts.append(len(queries.captured_queries))
    assert counts[0] == counts[1], counts


@pytest.mark.django_db
def test_a_withdrawn_decision_changes_the_version_the_live_page_compares():
    reviewer = make.user()
    run = make.run(status="interrupted", run_id="r1")
    interrupt = make.interrupt(run, interrupt_id="i", status="resolved")
    decision = make.decision(interrupt, reviewer, payload={"approved": True}, action="approve")
    before = history.since(run.thread, 0, limit=10).items[-1].data["version"]
    Decision.objects.filter(pk=decision.pk).update(superseded_at=timezone.now())
    Interrupt.objects.filter(pk=interrupt.pk).update(status="pending")
    after = history.since(run.thread, 0, limit=10).items[-1]
    assert after.data["version"] != before
    assert [e["words"] for e in after.data["entries"]] == ["Approved", "Waiting"]
    assert Run.objects.count() == 1
