"""The review pages. They read through ``selectors`` and change state only through
``runs`` and ``decisions``, exactly like the REST API.

Actions answer htmx requests with the fragment to swap in (a batch, a preview,
new thread events); without JavaScript the same forms post normally and
redirect back with a message.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from ..conf import AUDIT_PAGE_SIZE, INBOX_PAGE_SIZE, MAX_COMMENT_CHARS, MAX_JSON_CHARS, THREAD_EVENTS_LIMIT
from ..hub import claims, decisions, outbox, policies, refusals, refused, replies, runs, trail
from ..rules import eligibility, settling, targets
from ..reads import history, selectors
from ..rules.words import outcome_words
from .exports import csv_safe
from .forms import AgentForm, DecideForm, PolicyForm, StartRunForm
from ..models import Agent, Interrupt, Policy, Run, Thread
from ..protocol.errors import ProtocolError, refusal_body
from ..protocol.inert import args_form
from ..protocol.schema import (
    EDITED_ARGS,
    approval_payload,
    payload_errors,
    supports_edits,
)


def _without(params, *names: str) -> str:
    params = params.copy()
    for name in names:
        params.pop(name, None)
    return params.urlencode()


def _without_page(params) -> str:
    return _without(params, "page", "format")


def _safe_next(request, target: str | None, fallback: str) -> str:
    """``target`` if it points back into this site, else ``fallback``: never an open redirect."""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    return fallback


def home(request):
    return redirect("inbox")


# --- the inbox ------------------------------------------------------------------


def _card_context(interrupt: Interrupt, rule: eligibility.Rule, user, approvals: list,
                  viewers: dict | None = None) -> dict:
    schema = interrupt.response_schema
    refused = policies.refusal(user, rule, interrupt)
    claim = claims.shown(interrupt)
    return {
        # Who is reviewing it, and whether deciding must first confirm it is someone else.
        "claim": claim,
        "claimed_by_other": claim is not None and claim.by != user.get_username(),
        # Who else has it open now, as names.
        "viewers": [name for by, name in (viewers or {}).get(interrupt.pk, []) if by != user.get_username()],
        "approval": approval_payload(schema, True) is not None,
        "edits": supports_edits(schema),
        # The form Edit & approve draws, a field per argument (None: the JSON textarea).
        "edit_schema": args_form(schema, interrupt.proposed_args) if supports_edits(schema) else None,
        "rule": rule,
        # Read-only for anyone the policy does not admit: the card says who may decide.
        "refused": refused,
        "approvals": approvals,
        "mine": next((d for d in approvals if d.user_id == user.pk), None),
        "remaining": max(rule.required_approvals - len(approvals), 0),
        # What a plain approval would join: shown on the card, and posted back with it.
        "standing": (standing := decisions.standing_answer(approvals)),
        "seen": decisions.answer_digest(standing),
        # The policy's target time, when it sets one: on track, at risk or breached.
        "target": targets.target(interrupt, rule, timezone.now()),
        # Past its expiresAt, not swept yet: only a cancel is still taken (C19, C20).
        "past_expiry": interrupt.expires_at is not None and interrupt.expires_at <= timezone.now(),
    }


def _batch_context(batch: selectors.Batch, resumed: dict, user, errors: dict | None = None,
                   rules: dict | None = None, viewers: dict | None = None) -> dict:
    rules = rules if rules is not None else eligibility.rules_for(batch.pending)
    live = {m.pk: m.live_decisions for m in batch.members}  # the members carry their live decisions
    viewers = viewers if viewers is not None else claims.viewers([i.pk for i in batch.pending])
    cards = {i.pk: {"interrupt": i, **_card_context(i, rules[i.pk], user, live.get(i.pk, []), viewers),
                    "errors": (errors or {}).get(i.pk)} for i in batch.pending}
    sending = _sending(batch, resumed.get(batch.run.pk), timezone.now())
    # In the batch's own order: a decided interrupt's line stands where its card stood.
    # An expired member is a line too, with nothing to act on: the resume cancels it (C19, C20).
    rows = [cards[m.pk] if m.pk in cards
            else {"interrupt": m, "expired": True} if m.status == Interrupt.Status.EXPIRED
            else {"interrupt": m, "decided": _decided(m, user, sending)}
            for m in batch.members
            if m.pk in cards or m.status == Interrupt.Status.EXPIRED or (m.status in _DECIDED and m.live_decisions)]
    return {"batch": batch, "cards": rows, "resume": sending}


_DECIDED = (Interrupt.Status.RESOLVED, Interrupt.Status.CANCELLED)


@dataclass(frozen=True)
class _Sending:
    """Where a batch's answers stand, as its section says: the resume run if any, and whether Undo is offered.

    ``state``: ``open`` (some of it waits for decisions), ``held`` (queued, held
    for undo until ``until``), ``sending`` (queued and due), ``sent`` (a
    process took it: the agent has it, or is being sent it), ``closed``
    (closed unsent: expired before Countersign answered expired interrupts with ``cancelled``).
    """

    run: Run | None
    state: str
    until: datetime | None = None
    left: int = 0  # whole seconds of the hold left when rendered (the page counts down from there)

    @property
    def undo(self) -> bool:
        return self.state in ("open", "held", "sending")


def _sending(batch: selectors.Batch, resume: Run | None, now) -> _Sending:
    if resume is None and any(m.status == Interrupt.Status.EXPIRED for m in batch.members) \
            and not any(m.status == Interrupt.Status.PENDING for m in batch.members):
        return _Sending(None, "closed")  # expired under the old rule: closed with its batch, never sent
    if resume is None:
        return _Sending(None, "open")
    if not runs.withdrawable(resume):
        return _Sending(resume, "sent")
    until = runs.undo_until(resume)
    if until is not None and until > now:
        return _Sending(resume, "held", until, math.ceil((until - now).total_seconds()))
    return _Sending(resume, "sending")


def _decided(member: Interrupt, user, sending: _Sending) -> dict:
    """A decided interrupt's one line: what was decided, in words, by whom, and whether this reader may undo it."""
    live = member.live_decisions
    closing = live[-1]
    mine = any(d.user_id == user.pk for d in live)
    return {
        "words": outcome_words(closing), "action": closing.action, "decisions": live,
        "names": ", ".join(d.user.get_full_name() or d.user.get_username() for d in live),
        "mine": mine, "undo": mine and sending.undo, "at": closing.created_at,
    }


def inbox(request):
    filters = selectors.InboxFilters.from_query(request.GET)
    in_force = selectors.policies_in_force(request)
    paginator = Paginator(selectors.inbox(filters, user=request.user, in_force=in_force), INBOX_PAGE_SIZE)
    if filters.unfiltered and filters.scope == "mine":
        # The page's count is the header's count: one count, not two, and
        # the cheap one (each of the others ~40 ms on PostgreSQL with 100,000 pending).
        paginator.count = request.pending_count = selectors.waiting_count(request.user, in_force)
    page = paginator.get_page(request.GET.get("page"))
    groups = selectors.inbox_batches(page.object_list)
    page.object_list = [i for b in groups for i in b.pending]
    resumed = selectors.resumed_by(b.run.pk for b in groups)
    rules = eligibility.rules_for(page.object_list, in_force)
    viewers = claims.viewers([i.pk for i in page.object_list])  # the page's, in one query
    context = {
        "filters": filters,
        "page": page,
        "batches": [_batch_context(b, resumed, request.user, rules=rules, viewers=viewers) for b in groups],
        "agents": selectors.agent_names(),
        "reasons": selectors.pending_reasons(),
        "query": _without_page(request.GET),
        "scope_query": _without(request.GET, "page", "format", "scope"),
        "now": timezone.now(),
        "awaiting": selectors.awaiting_agent(),
        "refused_answers": selectors.refused_answers(user=request.user),
        "settle_actions": SETTLE_ACTIONS,
    }
    if request.htmx and request.htmx.target == "inbox-list":
        return render(request, "interrupts/_inbox_list.html", context)
    return render(request, "interrupts/inbox.html", context)


def _render_batch(request, interrupt: Interrupt, errors: dict | None = None, *, decided: bool = False):
    whole = selectors.batch(interrupt.run)
    rules = eligibility.rules_for(whole.pending, selectors.policies_in_force(request))
    context = {**_batch_context(whole, selectors.resumed_by([whole.run.pk]), request.user, errors, rules=rules),
               "now": timezone.now()}
    if errors and interrupt not in whole.pending:
        # Its card is gone (decided by someone else, or expired): say why at the batch.
        context["batch_error"] = errors[interrupt.pk]
    # What the page keeps on screen when the live list no longer holds this batch
    # (countersign.js): what this reader just decided (or undid), or the refusal that says who won.
    context["keep"] = "conflict" if "batch_error" in context else "decided" if decided else ""
    return render(request, "interrupts/_batch.html", context)


@require_POST
def decide(request, pk: int):
    interrupt = get_object_or_404(Interrupt.objects.select_related("run__thread", "run__agent"), pk=pk)
    form = DecideForm(request.POST)
    problem = None
    if form.is_valid():
        data = form.cleaned_data
        try:
            status, payload = decisions.answer_for(
                interrupt, data["action"], payload=data["payload"], edited_args=data["edited_args"]
            )
            decision = decisions.decide(interrupt, request.user, status, payload, comment=data["comment"],
                                        seen=data["seen"] if "seen" in request.POST else None, fresh=True,
                                        claim_confirmed=data["confirm_claim"], unsent=replies.deferrable(request))
            replies.acknowledge_after(request, [decision])
        except ProtocolError as refused:
            # With its details: who decided first, and what (the batch says so in words).
            problem = refusal_body(refused.code, refused.message, fields=refused.details.get("errors"),
                                   **{k: v for k, v in refused.details.items() if k != "errors"})
    else:
        problem = refusal_body("INVALID_FORM", " ".join(
            f"{field}: {' '.join(errs)}" for field, errs in form.errors.items()))
    if request.htmx:
        return _render_batch(request, interrupt, errors={interrupt.pk: problem} if problem else None,
                             decided=problem is None)
    if problem:
        messages.error(request, problem["detail"])
    else:
        messages.success(request, f"Decision recorded for {interrupt.interrupt_id}.")
    return redirect(_safe_next(request, request.POST.get("next"), reverse("inbox")))


@require_http_methods(["GET", "POST"])
def undo(request, pk: int):
    """POST: take back my decision (``decisions.undo``). GET (htmx): the batch as it stands now.

    The page reads the GET to follow a decision it made until its resume is
    sent, and to say who decided a batch that left the list.
    """
    interrupt = get_object_or_404(Interrupt.objects.select_related("run__thread", "run__agent"), pk=pk)
    problem = None
    if request.method == "POST":
        try:
            decisions.undo(interrupt, request.user)
        except ProtocolError as refused:
            problem = refusals.render(refused).body
    if request.htmx:
        return _render_batch(request, interrupt, errors={interrupt.pk: problem} if problem else None,
                             decided=request.method == "POST" and problem is None)
    if request.method == "POST":
        if problem:
            messages.error(request, problem["detail"])
        else:
            messages.success(request, f"Undone: {interrupt.interrupt_id} waits for a decision again.")
    return redirect(_safe_next(request, request.POST.get("next"), reverse("inbox")))


#: Each way of changing a claim from a card: its function, and what the page says once done.
CLAIM_ACTIONS = {
    "claim": (lambda interrupt, user: claims.claim(interrupt, user), "You are reviewing {id}."),
    "take-over": (lambda interrupt, user: claims.claim(interrupt, user, take_over=True), "You took over {id}."),
    "release": (claims.release, "You released {id}."),
}


@require_POST
def claim(request, pk: int, how: str):
    """Claim, take over or release a card; the batch comes back re-rendered, with any refusal on the card."""
    interrupt = get_object_or_404(Interrupt.objects.select_related("run__thread", "run__agent"), pk=pk)
    change, said = CLAIM_ACTIONS[how]
    problem = None
    try:
        change(interrupt, request.user)
    except ProtocolError as refused:
        problem = refusal_body(refused.code, refused.message)
    if request.htmx:
        return _render_batch(request, interrupt, errors={interrupt.pk: problem} if problem else None)
    if problem:
        messages.error(request, problem["detail"])
    else:
        messages.success(request, said.format(id=interrupt.interrupt_id))
    return redirect(_safe_next(request, request.POST.get("next"), reverse("inbox")))


@require_POST
def retry_run(request, pk: int):
    """Retry-now: try a run waiting for its unreachable agent at once, not at its backoff time."""
    run = get_object_or_404(Run, pk=pk)
    retried = outbox.retry_now(run, request.user)
    said = (f"Trying {run.run_id} again now." if retried else
            f"Run {run.run_id} is no longer waiting for its agent ({run.get_status_display().lower()}).")
    if request.htmx:
        return render(request, "interrupts/_awaiting.html", {"awaiting": selectors.awaiting_agent(),
                                                             "said": said, "now": timezone.now()})
    (messages.success if retried else messages.error)(request, said)
    return redirect(_safe_next(request, request.POST.get("next"), reverse("inbox")))


#: What people may do about an answer the agent refused (``hub.refused``): each button's words.
SETTLE_ACTIONS = (("resend", "Send again"), ("reopen", "Reopen to answer again"), ("close", "Close the batch"))
#: Each way of settling (the ``how`` of its URL): the function that does it, and what the page then says.
_SETTLE = {"resend": (refused.resend, "Sent the answers again as {new}."),
           "reopen": (refused.reopen, "Reopened: the batch waits for new answers."),
           "close": (refused.close, "Closed the batch: the thread takes new input.")}


@require_POST
def settle_run(request, pk: int, how: str):
    """Resend, reopen or close the batch whose answers the agent refused (run ``pk``, the failed resume)."""
    run = get_object_or_404(Run.objects.select_related("thread"), pk=pk)
    settle, done = _SETTLE[how]
    try:
        result = settle(run, request.user)
    except ProtocolError as problem:
        said, ok = problem.message, False
    else:
        said, ok = done.format(new=getattr(result, "run_id", "")), True
    if request.htmx:
        on_thread = bool(request.POST.get("on_thread"))
        return render(request, "interrupts/_refused.html", {
            "refused_answers": selectors.refused_answers(thread=run.thread if on_thread else None, user=request.user),
            "refused_on_thread": on_thread, "refused_said": said, "settle_actions": SETTLE_ACTIONS})
    (messages.success if ok else messages.error)(request, said)
    return redirect(_safe_next(request, request.POST.get("next"), reverse("thread", args=[run.thread.thread_id])))


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


@require_POST
def edit_preview(request, pk: int):
    """Check edited args and show their word diff against the proposal before the final click.

    Without JavaScript the preview is a page of its own, and the comment typed
    with the edits rides along to its final form; with it, the card's one
    comment box is added when that form sends (forms.js).
    """
    interrupt = get_object_or_404(Interrupt, pk=pk)
    form = DecideForm({"action": "edit", "edited_args": request.POST.get("edited_args", "")})
    errors, edited = [], None
    if not form.is_valid():
        errors = [{"path": "", "message": " ".join(form.errors.get("edited_args", ["Invalid edits."]))}]
    else:
        edited = form.cleaned_data["edited_args"]
        try:
            errors = payload_errors(interrupt.response_schema, {"approved": True, EDITED_ARGS: edited})
        except ProtocolError as problem:  # the agent's schema cannot be used (REMOTE_REF, UNSAFE_PATTERN, ...)
            errors = [{"path": "", "message": problem.message}]
    claim = claims.shown(interrupt)
    return render(request, "interrupts/_edit_preview.html" if request.htmx else "interrupts/edit_preview.html", {
        "interrupt": interrupt, "edited": edited, "edited_json": json.dumps(edited, ensure_ascii=False),
        "errors": errors, "claim": claim,
        "claimed_by_other": claim is not None and claim.by != request.user.get_username(),
        "comment": request.POST.get("comment", "")[:MAX_COMMENT_CHARS],
        "next": _safe_next(request, request.POST.get("next"), reverse("inbox")),
        "edited_text": request.POST.get("edited_args", "")[:MAX_JSON_CHARS],
    })


# --- threads ----------------------------------------------------------------------


def threads(request):
    page = Paginator(selectors.threads(request.GET.get("agent", ""), request.GET.get("q", "").strip()), 50)
    return render(request, "interrupts/threads.html", {
        "page": page.get_page(request.GET.get("page")),
        "start_form": StartRunForm(),
        "q": request.GET.get("q", ""),
    })


def thread_detail(request, thread_id: str):
    thread = get_object_or_404(selectors.thread_rows(), thread_id=thread_id)
    shown = history.page(thread, limit=THREAD_EVENTS_LIMIT)
    return render(request, "interrupts/thread.html", {
        "thread": thread,
        "items": shown.items,
        "last_seq": shown.last_seq,
        "truncated": shown.count == THREAD_EVENTS_LIMIT,
        "pending": shown.pending,
        "start_form": StartRunForm(initial={"agent": thread.agent.name}),
        "runs": history.runs(thread),
        # Every refused answer holds the thread; each person sees those they may settle.
        "refused_answers": settling.settleable_by(request.user, held := selectors.refused_answers(thread=thread)),
        "refused_held": bool(held),
        "settle_actions": SETTLE_ACTIONS,
    })


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
    pending = selectors.thread_has_pending(thread)
    # The Runs list comes along: a run's status changes without an event of its own (queued, paused, finished).
    response = render(request, "interrupts/_history.html", {
        "items": shown.items, "thread": thread, "runs": history.runs(thread), "runs_part": True})
    response["X-Last-Seq"] = str(shown.last_seq)
    # A refused answer holds the thread like a pending decision does.
    response["X-Pending"] = "1" if pending or held else "0"
    response["X-Refused"] = str(len(refused_answers))
    return response


@require_POST
def start_run(request, thread_id: str | None = None):
    form = StartRunForm(request.POST)
    thread = get_object_or_404(Thread, thread_id=thread_id) if thread_id else None
    if not form.is_valid() or (thread is None and form.cleaned_data.get("agent") is None):
        messages.error(request, "Pick an agent and write a message (at most 100,000 characters).")
        return redirect(_safe_next(request, request.META.get("HTTP_REFERER"), reverse("threads")))
    agent = thread.agent if thread else form.cleaned_data["agent"]
    try:
        run = runs.start_run(agent, user=request.user, thread_id=thread.thread_id if thread else None,
                             message=form.cleaned_data["message"] or None)
    except ProtocolError as refused:
        messages.error(request, refused.message)
        return redirect(reverse("thread", args=[thread.thread_id]) if thread else reverse("threads"))
    return redirect("thread", run.thread.thread_id)


# --- the audit trail ------------------------------------------------------------------


def audit(request, thread_id: str | None = None):
    params = request.GET.copy()
    if thread_id:
        get_object_or_404(Thread, thread_id=thread_id)
        params["thread"] = thread_id
    filters = selectors.AuditFilters.from_query(params)
    queryset = selectors.audit(filters)
    export = request.GET.get("format")
    if export == "chain":
        return _export_chain()
    if export in ("csv", "json"):
        return _export(queryset, export)
    page = Paginator(queryset, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    # The last verification, extended by the entries since (links only, a
    # bounded number): the page never recomputes a long chain whole.
    checkpoint, broken = trail.verify_recent()
    return render(request, "interrupts/audit.html", {
        "checkpoint": checkpoint,
        "trail_problem": str(broken) if broken else (checkpoint.problem.split("\n")[0] if checkpoint else ""),
        "filters": filters,
        "rows": selectors.audit_rows(page.object_list),
        "page": page,
        "thread_id": thread_id,
        "agents": selectors.agent_names(),
        "query": _without_page(request.GET),
    })


def _export_chain():
    """The whole hash chain, one JSON object per line, streamed: what the README's script verifies offline.

    Never filtered: a chain verifies only whole, from entry 1.
    """
    body = (json.dumps(entry, ensure_ascii=False) + "\n" for entry in trail.chain())
    response = StreamingHttpResponse(body, content_type="application/jsonl")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="countersign-chain-{stamp}.jsonl"'
    response[AUDIT_HEAD_HEADER] = str(trail.head())  # the file's last line is at or past it
    return response


#: The response header every audit export carries: the chain's head as it began, ``SEQ:HASH``.
AUDIT_HEAD_HEADER = "Countersign-Audit-Head"


class _Echo:
    def write(self, value):
        return value


def _export(queryset, kind: str):
    """Every matching row, streamed in pages so a large trail never sits in memory whole.

    Each row carries ``auditHead``, the chain's head as the export began
    (``SEQ:HASH``): a copy kept outside the database anchors the chain, and
    ``manage.py audit verify --expect-head`` with it finds a deleted tail.
    """
    anchor = str(trail.head())

    def rows():
        paginator = Paginator(queryset, 500)
        for number in paginator.page_range:
            for row in selectors.audit_rows(paginator.page(number).object_list):
                yield {**row.as_dict(), "auditHead": anchor}

    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    if kind == "json":
        def body():
            yield "[\n"
            for index, row in enumerate(rows()):
                yield ("," if index else "") + json.dumps(row, ensure_ascii=False) + "\n"
            yield "]\n"
        response = StreamingHttpResponse(body(), content_type="application/json")
    else:
        writer = csv.writer(_Echo())

        def body():
            header = None
            for row in rows():
                flat = {k: (json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v) for k, v in row.items()}
                if header is None:
                    header = list(flat)
                    yield writer.writerow(header)
                yield writer.writerow([csv_safe(flat[k]) for k in header])
        response = StreamingHttpResponse(body(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="countersign-audit-{stamp}.{kind}"'
    response[AUDIT_HEAD_HEADER] = anchor
    return response


# --- agents -----------------------------------------------------------------------------


def agents(request):
    return render(request, "interrupts/agents.html", {
        "agents": selectors.agents_overview(),
        "policies": selectors.policies_overview(selectors.policies_in_force(request)),
    })


def _secret_shown_once(request, agent: Agent, secret: str, *, rotated: bool):
    # Rendered, not redirected with a message: a secret in the session or a
    # cookie would outlive this one page.
    response = render(request, "interrupts/agent_secret.html", {"agent": agent, "secret": secret, "rotated": rotated})
    response["Cache-Control"] = "no-store"
    return response


@staff_member_required
def agent_edit(request, name: str | None = None):
    agent = get_object_or_404(Agent, name=name) if name else None
    form = AgentForm(request.POST or None, instance=agent)
    if request.method == "POST" and form.is_valid():
        saved = form.save()
        messages.success(request, f"Saved agent {saved.name}.")
        for notice in form.notices:  # e.g. the credential was dropped: the URL moved to another origin
            messages.warning(request, notice)
        if agent is None:  # registered just now: its signing secret is shown this once
            return _secret_shown_once(request, saved, saved.signing_secret, rotated=False)
        return redirect("agents")
    return render(request, "interrupts/agent_form.html", {"form": form, "agent": agent})


@staff_member_required
@require_POST
def agent_rotate_secret(request, name: str):
    """Rotate an agent's signing secret and show the new one, once; the old one stops verifying at once."""
    agent = get_object_or_404(Agent, name=name)
    return _secret_shown_once(request, agent, agent.rotate_signing_secret(), rotated=True)


@staff_member_required
def policy_edit(request, pk: int | None = None):
    policy = get_object_or_404(Policy, pk=pk) if pk else None
    form = PolicyForm(request.POST or None, instance=policy)
    if request.method == "POST" and form.is_valid():
        saved = form.save()
        messages.success(request, f"Saved policy {saved.name}.")
        return redirect("agents")
    return render(request, "interrupts/policy_form.html", {"form": form, "policy": policy})


@staff_member_required
@require_POST
def policy_delete(request, pk: int):
    policy = get_object_or_404(Policy, pk=pk)
    policy.delete()
    messages.success(request, f"Deleted policy {policy.name}; its interrupts now follow the next most specific one.")
    return redirect("agents")
