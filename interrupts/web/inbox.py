"""The inbox: pending interrupts in batches, one card each, and what a reviewer does on a card."""

from __future__ import annotations

import json
import math
from collections.abc import Container
from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.text import Truncator
from django.views.decorators.http import require_http_methods, require_POST

from ..conf import INBOX_COUNTED, INBOX_PAGE_SIZE, INBOX_VIEW_COOKIE, MAX_COMMENT_CHARS, MAX_GRANT_HELD, MAX_JSON_CHARS
from ..hub import claims, decisions, grants, outbox, passkeys, policies, refusals, replies, runs
from ..hub.refusals import Refusal
from ..models import Interrupt, Run
from ..protocol.errors import ProtocolError, refusal_body
from ..protocol.inert import args_form
from ..protocol.schema.edits import EDITED_ARGS, approval_payload, supports_edits
from ..protocol.schema.payloads import payload_errors
from ..reads import selectors
from ..rules import eligibility, looked, targets, words
from .forms import DecideForm
from .navigation import back_to, htmx_or_redirect, without, without_page
from .settle import SETTLE_ACTIONS
from .templatetags.countersign import reason_words


def home(request):
    return redirect("inbox")


def _title_context(interrupt: Interrupt, rule: eligibility.Rule, user, viewers: dict | None = None) -> dict:
    """What every card shows, folded or whole (its title, the bulk box, who is on it), and its triage row reads."""
    claim = claims.shown(interrupt)
    return {
        # Read-only for anyone the policy does not admit: no bulk box to tick.
        "refused": policies.refusal(user, rule, interrupt),
        # Who is reviewing it, and whether deciding must first confirm it is someone else.
        "claim": claim,
        "claimed_by_other": claim is not None and claim.by != user.get_username(),
        # Who else has it open now, as names.
        "viewers": [name for by, name in (viewers or {}).get(interrupt.pk, []) if by != user.get_username()],
    }


def _card_context(interrupt: Interrupt, rule: eligibility.Rule, user, approvals: list,
                  viewers: dict | None = None) -> dict:
    schema = interrupt.response_schema
    return {
        **_title_context(interrupt, rule, user, viewers),
        "folded": False,
        "approval": approval_payload(schema, True) is not None,
        "edits": supports_edits(schema),
        # The form Edit & approve draws, a field per argument (None: the JSON textarea).
        "edit_schema": args_form(schema, interrupt.proposed_args) if supports_edits(schema) else None,
        "rule": rule,
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
                   rules: dict | None = None, viewers: dict | None = None, suggested: dict | None = None,
                   folded: Container[int] = ()) -> dict:
    """One batch's section; the cards of ``folded`` (pks) as their titles only, read whole when opened (``cards``)."""
    rules = rules if rules is not None else eligibility.rules_for(batch.pending)
    live = {m.pk: m.live_decisions for m in batch.members}  # the members carry their live decisions
    viewers = viewers if viewers is not None else claims.viewers([i.pk for i in batch.pending])
    suggested = suggested if suggested is not None else selectors.grant_suggestions(batch.pending)
    # Every row names all its kinds: a key a template asks for and misses is an exception Django catches (x25 a page).
    cards = {i.pk: {"interrupt": i, "folded": True, **_PENDING, **_title_context(i, rules[i.pk], user, viewers)}
             if i.pk in folded
             else {"interrupt": i, **_PENDING, **_card_context(i, rules[i.pk], user, live.get(i.pk, []), viewers),
                   "suggested": suggested.get(i.pk), "errors": (errors or {}).get(i.pk)} for i in batch.pending}
    sending = _sending(batch, resumed.get(batch.run.pk), timezone.now())
    # In the batch's own order: a decided interrupt's line stands where its card stood.
    # An expired member is a line too, with nothing to act on: the resume cancels it (C19, C20).
    rows = [cards[m.pk] if m.pk in cards
            else {"interrupt": m, "expired": True} if m.status == Interrupt.Status.EXPIRED
            else {"interrupt": m, "decided": _decided(m, user, sending)}
            for m in batch.members
            if m.pk in cards or m.status == Interrupt.Status.EXPIRED or (m.status in _DECIDED and m.live_decisions)]
    return {"batch": batch, "cards": rows, "resume": sending, "folded": any(pk in folded for pk in cards)}


_DECIDED = (Interrupt.Status.RESOLVED, Interrupt.Status.CANCELLED)
_PENDING = {"decided": None, "expired": False}


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
    # A grant's approval is in its author's name, but they did not take it: not theirs to undo.
    mine = any(d.user_id == user.pk and not d.grant_id for d in live)
    return {
        "words": words.outcome_words(closing), "action": closing.action, "decisions": live,
        "names": ", ".join(words.decider(d) for d in live),
        "mine": mine, "undo": mine and sending.undo, "at": closing.created_at,
    }


def cards(request, filters: selectors.InboxFilters, fold: bool = False) -> dict:
    """The cards ``filters`` match, a page of them in batches: what the inbox lists and the thread page decides.

    ``fold``: one request shows at a time (the inbox's default view), so only the first card is rendered
    whole; the others are folded to their titles, and the page reads a batch whole when one of its cards
    is opened. Rendering 25 whole cards was most of the page's time.
    """
    in_force = selectors.policies_in_force(request)
    matching = selectors.inbox(filters, user=request.user, in_force=in_force)
    # Counted as far as the page asked for, and the header's count with it when it is the same list: a
    # reader does not page through 100,000, and an exact count read every row on every page.
    wanted = _page_number(request.GET.get("page"))
    start, keys = (wanted - 1) * INBOX_PAGE_SIZE, None
    if start >= INBOX_COUNTED:
        # Deep in the list: this page's rows and one more say whether a next page follows, in one walk of
        # the list (a count up to here and then the page walked it twice).
        keys = selectors.page_keys(matching, start, INBOX_PAGE_SIZE + 1)
    found = (selectors.Counted(start + min(len(keys), INBOX_PAGE_SIZE), more=len(keys) > INBOX_PAGE_SIZE) if keys
             else selectors.counted(matching, max(INBOX_COUNTED, start)))  # past the end: the last page
    if filters.unfiltered and filters.scope == "mine":
        request.pending_count = found.at_most(INBOX_COUNTED)
    paginator = Paginator(matching, INBOX_PAGE_SIZE)
    paginator.count = found.n + found.more  # one past the count when there are more: the page has a next
    page = paginator.get_page(wanted)
    if not keys:  # a page within the count, or past the end (the paginator then gives the last)
        keys = selectors.page_keys(matching, (page.number - 1) * INBOX_PAGE_SIZE, INBOX_PAGE_SIZE)
    groups = selectors.inbox_batches(keys[:INBOX_PAGE_SIZE])
    page.object_list = [i for b in groups for i in b.pending]
    resumed = selectors.resumed_by((b.run.pk for b in groups), whole=False)
    rules = eligibility.rules_for(page.object_list, in_force)
    viewers = claims.viewers([i.pk for i in page.object_list])  # the page's, in one query
    folded = {i.pk for i in page.object_list[1:]} if fold else set()
    suggested = selectors.grant_suggestions([i for i in page.object_list if i.pk not in folded])  # likewise
    return {
        "filters": filters,
        "page": page,
        "counted": found,
        "batches": [_batch_context(b, resumed, request.user, rules=rules, viewers=viewers, suggested=suggested,
                                   folded=folded)
                    for b in groups],
        "now": timezone.now(),
        # The thread filter picks from the threads this page lists (and the one chosen): no query of its own.
        "threads": sorted({b.run.thread.thread_id for b in groups} | ({filters.thread} if filters.thread else set())),
    }


#: Past any list's end (25 million rows), and within what a database's LIMIT takes.
_LAST_PAGE = 1_000_000


def _page_number(asked: str | None) -> int:
    """The page asked for, as a number (1 for anything else, as the paginator would; past the end, the last)."""
    try:
        return min(max(int(asked), 1), _LAST_PAGE)
    except (TypeError, ValueError):
        return 1


def inbox(request):
    filters = selectors.InboxFilters.from_query(request.GET)
    if request.GET.get("embedded") == "1":
        # The thread page's cards, read again live: no tools, no triage list.
        return render(request, "interrupts/_inbox_list.html", {**cards(request, filters), "embedded": True})
    # The view this reader chose (triage.js keeps it in a cookie): every card stacked is rendered whole.
    context = cards(request, filters, fold=request.COOKIES.get(INBOX_VIEW_COOKIE) != "all")
    context |= {
        "agents": selectors.agent_names(),
        "reasons": selectors.pending_reasons(),
        "query": without_page(request.GET),
        "scope_query": without(request.GET, "page", "format", "scope"),
        "awaiting": selectors.awaiting_agent(),
        "refused_answers": selectors.refused_answers(user=request.user),
        "settle_actions": SETTLE_ACTIONS,
        "chips": _chips(request.GET, filters),
        "clear_query": without(request.GET, "page", "format", *_CHIPPED),
        "view_cookie": INBOX_VIEW_COOKIE,
    }
    if request.htmx and request.htmx.target == "inbox-list":
        return render(request, "interrupts/_inbox_list.html", context)
    return render(request, "interrupts/inbox.html", context)


_AGE_WORDS = {"1h": "waiting over 1 hour", "1d": "waiting over 1 day", "7d": "waiting over 7 days"}


def _chips(params, filters: selectors.InboxFilters) -> list[dict]:
    """The filters on, each as words and the query without it: removable chips above the list."""
    said = [("agent", f"Agent: {filters.agent}"), ("reason", f"Reason: {reason_words(filters.reason)}"),
            ("thread", f"Thread: {Truncator(filters.thread).chars(28)}"),
            ("q", f"Search: {Truncator(filters.q).chars(28)}"),
            ("age", _AGE_WORDS.get(filters.age, "").capitalize()), ("expiring", "Expiring within an hour")]
    return [{"words": words, "query": without(params, "page", "format", name)}
            for name, words in said if getattr(filters, name)]


_CHIPPED = ("agent", "reason", "thread", "q", "age", "expiring")


def _render_batch(request, interrupt: Interrupt, errors: dict | None = None, *, decided: bool = False,
                  whole: selectors.Batch | None = None):
    """The card of ``interrupt``'s batch, as it stands now (``whole``: read already, nothing changed since)."""
    whole = whole or selectors.batch(interrupt.run)
    rules = eligibility.rules_for(whole.pending, selectors.policies_in_force(request))
    resumed = selectors.resumed_by([whole.run.pk], whole=False)
    context = {**_batch_context(whole, resumed, request.user, errors, rules=rules), "now": timezone.now()}
    if errors and interrupt not in whole.pending:
        # Its card is gone (decided by someone else, or expired): say why at the batch.
        context["batch_error"] = errors[interrupt.pk]
    # What the page keeps on screen when the live list no longer holds this batch
    # (countersign.js): what this reader just decided (or undid), or the refusal that says who won.
    context["keep"] = "conflict" if "batch_error" in context else "decided" if decided else ""
    return render(request, "interrupts/_batch.html", context)


@require_POST
def decide(request, pk: int):
    interrupt = get_object_or_404(selectors.card_interrupts(), pk=pk)
    form = DecideForm(request.POST)
    problem = None
    if form.is_valid():
        data = form.cleaned_data
        granting = data["action"] == "grant"
        try:
            reported = _looked(data["looked"], interrupt)
            rule = eligibility.rule_for(interrupt)
            if looked.unopened(rule, interrupt, data["action"], reported):
                raise Refusal("LOOK_FIRST", f"Policy {rule.name!r} asks that long args be read before they are "
                                            "approved: open the full args (\"as JSON\") on the card first.",
                              status=400, policy=rule.name)
            answer = decisions.answer_for(interrupt, "approve" if granting else data["action"],
                                          payload=data["payload"], edited_args=data["edited_args"])
            # Where policy asks, the passkey's assertion must sign exactly the answer taken (checked here, kept).
            signed = None
            if rule.require_passkey and data["passkey"]:
                signs = decisions.answer_to_sign(interrupt, request.user, answer)
                signed = passkeys.countersign(request, interrupt, *signs, rule, data["passkey"])
            decision = decisions.decide(interrupt, request.user, answer.status, answer.payload,
                                        comment=data["comment"], seen=data["seen"] if "seen" in request.POST else None,
                                        fresh=True, claim_confirmed=data["confirm_claim"],
                                        unsent=replies.deferrable(request), action=answer.action,
                                        looked=reported, passkey=signed, rule=rule)
            replies.acknowledge_after(request, [decision])
            if granting:  # approved first: a grant refused leaves the approval standing, and says why
                grants.create(request.user, agent=interrupt.run.agent, tool_name=interrupt.tool_name,
                              args_schema=grants.scope_from(interrupt.proposed_args,
                                                            request.POST.getlist("grant_hold")[:MAX_GRANT_HELD]),
                              why=data["grant_why"], hours=data["grant_hours"], max_uses=data["grant_uses"],
                              source=interrupt)
        except ProtocolError as refused:
            # With its details: who decided first, and what (the batch says so in words).
            problem = refusal_body(refused.code, refused.message, fields=refused.details.get("errors"),
                                   **{k: v for k, v in refused.details.items() if k != "errors"})
    else:
        problem = refusal_body("INVALID_FORM", " ".join(
            f"{field}: {' '.join(errs)}" for field, errs in form.errors.items()))
    return htmx_or_redirect(
        request,
        lambda: _render_batch(request, interrupt, errors={interrupt.pk: problem} if problem else None,
                              decided=problem is None),
        back_to(request, reverse("inbox")),
        (messages.error, problem["detail"]) if problem else
        (messages.success, f"Approved {interrupt.interrupt_id}; your grant approves calls like it from now on."
         if form.cleaned_data["action"] == "grant" else f"Decision recorded for {interrupt.interrupt_id}."),
    )


def _looked(text: str, interrupt: Interrupt) -> dict | None:
    """What the card's script reported (none without scripts), or a refusal saying what is wrong with it."""
    if not text:
        return None
    try:
        return looked.parse(text, interrupt)
    except ValueError as problem:
        raise Refusal("INVALID_FORM", f"What the card reported you had in view is not usable: {problem}.",
                      status=400) from None


@require_http_methods(["GET", "POST"])
def undo(request, pk: int):
    """POST: take back my decision (``decisions.undo``). GET (htmx): the batch as it stands now.

    The page reads the GET to follow a decision it made until its resume is
    sent, and to say who decided a batch that left the list.
    """
    if request.method == "GET" and request.htmx:  # the card and its batch, read together
        found = selectors.batch_of(pk)
        if found is None:
            raise Http404("No Interrupt matches the given query.")  # as get_object_or_404 says it
        interrupt, whole = found
        return _render_batch(request, interrupt, whole=whole)
    interrupt = get_object_or_404(selectors.card_interrupts(), pk=pk)
    problem, notes = None, []
    if request.method == "POST":
        try:
            decisions.undo(interrupt, request.user)
        except ProtocolError as refused:
            problem = refusals.render(refused).body
        notes.append((messages.error, problem["detail"]) if problem else
                     (messages.success, f"Undone: {interrupt.interrupt_id} waits for a decision again."))
    return htmx_or_redirect(
        request,
        lambda: _render_batch(request, interrupt, errors={interrupt.pk: problem} if problem else None,
                              decided=request.method == "POST" and problem is None),
        back_to(request, reverse("inbox")),
        *notes,
    )


#: Each way of changing a claim from a card: its function, and what the page says once done.
CLAIM_ACTIONS = {
    "claim": (lambda interrupt, user: claims.claim(interrupt, user), "You are reviewing {id}."),
    "take-over": (lambda interrupt, user: claims.claim(interrupt, user, take_over=True), "You took over {id}."),
    "release": (claims.release, "You released {id}."),
}


@require_POST
def claim(request, pk: int, how: str):
    """Claim, take over or release a card; the batch comes back re-rendered, with any refusal on the card."""
    interrupt = get_object_or_404(selectors.card_interrupts(), pk=pk)
    change, said = CLAIM_ACTIONS[how]
    problem = None
    try:
        change(interrupt, request.user)
    except ProtocolError as refused:
        problem = refusal_body(refused.code, refused.message)
    return htmx_or_redirect(
        request,
        lambda: _render_batch(request, interrupt, errors={interrupt.pk: problem} if problem else None),
        back_to(request, reverse("inbox")),
        (messages.error, problem["detail"]) if problem else (messages.success, said.format(id=interrupt.interrupt_id)),
    )


@require_POST
def retry_run(request, pk: int):
    """Retry-now: try a run waiting for its unreachable agent at once, not at its backoff time."""
    run = get_object_or_404(Run, pk=pk)
    retried = outbox.retry_now(run, request.user)
    said = (f"Trying {run.run_id} again now." if retried else
            f"Run {run.run_id} is no longer waiting for its agent ({run.get_status_display().lower()}).")
    return htmx_or_redirect(
        request,
        lambda: render(request, "interrupts/_awaiting.html", {"awaiting": selectors.awaiting_agent(),
                                                              "said": said, "now": timezone.now()}),
        back_to(request, reverse("inbox")),
        (messages.success if retried else messages.error, said),
    )


@require_POST
def edit_preview(request, pk: int):
    """Check edited args and show their word diff against the proposal before the final click.

    Without JavaScript the preview is a page of its own, and the comment typed
    with the edits rides along to its final form; with it, the card's one
    comment box is added when that form sends (forms.js).
    """
    interrupt = get_object_or_404(Interrupt.objects.select_related("run"), pk=pk)
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
        "next": back_to(request, reverse("inbox")),
        "edited_text": request.POST.get("edited_args", "")[:MAX_JSON_CHARS],
        # Its final click takes the reviewer's passkey too, where the policy asks (passkeys.js).
        "passkey": eligibility.rule_for(interrupt).require_passkey,
    })
