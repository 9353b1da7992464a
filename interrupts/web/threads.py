"""Threads: the list, one thread's history as it grows, and starting or stopping a run."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from ..conf import THREAD_EVENTS_LIMIT
from ..hub import runs
from ..models import Run, Thread
from ..protocol.errors import ProtocolError
from ..reads import history, selectors
from ..rules import settling
from . import inbox
from .forms import StartRunForm
from .settle import SETTLE_ACTIONS


def threads(request, start_form: StartRunForm | None = None, status: int = 200):
    page = Paginator(selectors.threads(request.GET.get("agent", ""), request.GET.get("q", "").strip()), 50)
    return render(request, "interrupts/threads.html", {
        "page": page.get_page(request.GET.get("page")),
        "start_form": start_form or StartRunForm(),
        "q": request.GET.get("q", ""),
    }, status=status)


def thread_detail(request, thread_id: str, start_form: StartRunForm | None = None, status: int = 200):
    thread = get_object_or_404(selectors.thread_rows(), thread_id=thread_id)
    shown = history.page(thread, limit=THREAD_EVENTS_LIMIT)
    # Its pending requests as the inbox's cards, decided here (read again live through the inbox's list).
    its = selectors.InboxFilters(thread=thread.thread_id, scope="all")
    waiting = inbox.cards(request, its) if shown.pending else {}
    return render(request, "interrupts/thread.html", {
        **waiting,
        "embedded": True,
        "list_url": f"{reverse('inbox')}?{urlencode({'thread': thread.thread_id, 'scope': 'all', 'embedded': '1'})}",
        "thread": thread,
        "items": shown.items,
        "last_seq": shown.last_seq,
        "truncated": shown.count == THREAD_EVENTS_LIMIT,
        "pending": shown.pending,
        "start_form": start_form or StartRunForm(initial={"agent": thread.agent.name}),
        "runs": history.runs(thread),
        # Every refused answer holds the thread; each person sees those they may settle.
        "refused_answers": settling.settleable_by(request.user, held := selectors.refused_answers(thread=thread)),
        "refused_held": bool(held),
        "settle_actions": SETTLE_ACTIONS,
    }, status=status)


def thread_events(request, thread_id: str):
    """The thread's events after ``after``, rendered as history items (for live updates and gaps), with the
    decisions that may have changed since and the Runs list."""
    thread = get_object_or_404(Thread, thread_id=thread_id)
    try:
        after = max(int(request.GET.get("after", 0)), 0)
    except ValueError:
        after = 0
    held = selectors.refused_answers(thread=thread)
    refused_answers = settling.settleable_by(request.user, held)
    if request.GET.get("part") == "refused":
        # The answers the agent refused, as the thread page shows them: it
        # asks when the count it holds (X-Refused) is not the thread's.
        return render(request, "interrupts/_refused.html", {
            "refused_answers": refused_answers, "refused_on_thread": True, "settle_actions": SETTLE_ACTIONS})
    shown = history.since(thread, after, limit=500)
    # The Runs list comes along: a run's status changes without an event of its own (queued, paused, finished).
    # Read before ``pending``: a run it shows paused has its interrupts committed with that status, so
    # the page never hears "paused" with "nothing pending" and stops looking.
    runs = history.runs(thread)
    pending = selectors.thread_has_pending(thread)
    response = render(request, "interrupts/_history.html", {
        "items": shown.items, "thread": thread, "runs": runs, "runs_part": True})
    response["X-Last-Seq"] = str(shown.last_seq)
    # A refused answer holds the thread like a pending decision does.
    response["X-Pending"] = "1" if pending or held else "0"
    response["X-Refused"] = str(len(refused_answers))
    return response


@require_POST
def start_run(request, thread_id: str | None = None):
    thread = get_object_or_404(Thread, thread_id=thread_id) if thread_id else None
    # A thread's own run goes to its agent, whatever the post names.
    form = StartRunForm({**request.POST.dict(), "agent": thread.agent.name} if thread else request.POST)
    if not form.is_valid():
        # The page again, with what was typed and the error beside its field.
        if thread:
            return thread_detail(request, thread.thread_id, start_form=form, status=400)
        return threads(request, start_form=form, status=400)
    agent = thread.agent if thread else form.cleaned_data["agent"]
    try:
        run = runs.start_run(agent, user=request.user, thread_id=thread.thread_id if thread else None,
                             message=form.cleaned_data["message"])
    except ProtocolError as refused:
        messages.error(request, refused.message)
        return redirect(reverse("thread", args=[thread.thread_id]) if thread else reverse("threads"))
    return redirect("thread", run.thread.thread_id)


@require_POST
def cancel_run(request, pk: int):
    """Stop run (staff): end a streaming or waiting run with CANCELLED_BY_OPERATOR; back to its thread."""
    run = get_object_or_404(Run.objects.select_related("thread"), pk=pk)
    try:
        stopped = runs.cancel(run, request.user)
    except ProtocolError as refused:  # STAFF_ONLY
        messages.error(request, refused.message)
        return redirect("thread", run.thread.thread_id)
    if stopped:
        messages.success(request, f"Stopped run {run.run_id}.")
    else:
        messages.error(request, f"Run {run.run_id} already ended; there was nothing to stop.")
    return redirect("thread", run.thread.thread_id)
