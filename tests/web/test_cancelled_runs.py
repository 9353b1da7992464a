"""A run its agent ends with RUN_FINISHED outcome ``cancelled`` shows as cancelled wherever a run's end shows.

Neither a success nor an error: the thread page's runs and timeline, the
threads list, the API's runs and threads, the admin, and the audit trail of
a resume that ended so.
"""

import json
import re

import pytest
from django.urls import reverse

from interrupts.hub import decisions, events, outcomes
from interrupts.models import Run

from .. import factories as make

pytestmark = pytest.mark.django_db


def ended_cancelled(run: Run) -> Run:
    """``run`` streamed to a RUN_FINISHED whose outcome is cancelled, recorded as the streamer records it."""
    Run.objects.filter(pk=run.pk).update(status=Run.Status.STREAMING)
    run.refresh_from_db()
    ids = {"threadId": run.thread.thread_id, "runId": run.run_id}
    terminal = {"type": "RUN_FINISHED", **ids, "outcome": {"type": "cancelled"}}
    events.append_many(run, [{"type": "RUN_STARTED", **ids}, terminal])
    outcomes.finish(run, terminal)
    return Run.objects.get(pk=run.pk)


def test_c32_the_run_itself_is_cancelled_with_no_error():
    run = ended_cancelled(make.run())
    assert (run.status, run.outcome, run.error_code, run.error_message) == ("cancelled", {"type": "cancelled"}, "", "")
    assert run.finished_at is not None


def test_the_thread_page_shows_it_cancelled_in_its_runs_and_its_timeline(client, staff):
    run = ended_cancelled(make.run())
    page = client.get(reverse("thread", args=[run.thread.thread_id])).content.decode()
    assert re.findall(r'data-testid="run-status">([^<]*)<', page) == ["cancelled"]
    [end] = re.findall(r'<div class="run-end[^"]*".*?</div>', page, re.S)
    assert 'class="run-end outcome-cancelled"' in end and 'data-testid="run-cancelled">cancelled<' in end
    for wrong in ("failed", "error", "RUN_ERROR", "succeeded", "success"):
        assert wrong not in end.replace("not an error", ""), wrong
    # Ended: nothing to stop, and the thread takes new input.
    assert 'data-testid="stop-run"' not in page and 'type="submit" disabled' not in page
    live = client.get(reverse("thread-events", args=[run.thread.thread_id])).content.decode()
    assert 'class="run-end outcome-cancelled"' in live


def test_the_threads_list_shows_the_latest_run_cancelled(client, staff):
    ended_cancelled(make.run())
    page = client.get(reverse("threads")).content.decode()
    assert re.findall(r'data-testid="latest-status">([^<]*)<', page) == ["cancelled"]


def test_the_api_says_cancelled_for_the_run_and_its_thread(client, staff):
    run = ended_cancelled(make.run())
    body = client.get(f"/api/runs/{run.run_id}/").json()
    assert (body["status"], body["outcome"], body["error_code"], body["error_message"]) == (
        "cancelled", {"type": "cancelled"}, "", "")
    assert not body.get("refusal") and not body.get("refused")
    [thread] = client.get("/api/threads/").json()["results"]
    assert thread["status"] == "cancelled"


def test_the_admin_lists_and_shows_it_cancelled(client, staff):
    run = ended_cancelled(make.run())
    listed = client.get(reverse("admin:interrupts_run_changelist"), {"status__exact": "cancelled"}).content.decode()
    assert run.run_id in listed and 'class="field-status">Cancelled<' in listed
    other = client.get(reverse("admin:interrupts_run_changelist"), {"status__exact": "succeeded"}).content.decode()
    assert run.run_id not in other
    shown = client.get(reverse("admin:interrupts_run_change", args=[run.pk])).content.decode()
    assert "Cancelled" in shown and "&quot;cancelled&quot;" in shown


def test_a_resume_the_agent_cancelled_is_not_a_refused_answer_in_the_audit(client, staff):
    interrupted = make.run(status="interrupted")
    decisions.decide(make.interrupt(interrupted, interrupt_id="i-1"), staff, "resolved", {"approved": True})
    resume = ended_cancelled(Run.objects.get(parent=interrupted))
    page = client.get(reverse("audit")).content.decode()
    [said] = re.findall(r'data-testid="audit-accepted">([^<]*)<', page)
    assert said == "the agent cancelled the resumed run"
    assert re.search(r"<p>run <code>[^<]*</code> cancelled\s", page) and resume.status == "cancelled"
    [row] = json.loads(b"".join(client.get(reverse("audit"), {"format": "json"}).streaming_content))
    assert (row["accepted"], row["resumedRunStatus"], row["resumedRunError"]) == ("cancelled", "cancelled", None)
