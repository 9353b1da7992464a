"""Telling people: signed webhooks and emails, queued in the change they report, sent by the supervisor.

Producers (``outcomes``, ``decisions``, ``escalation``) call ``raised``,
``decided``, ``expired``, ``refused`` and ``escalated`` inside the
transaction that makes the change, so a change that rolls back queues
nothing and one that commits is never lost: each writes ``Delivery`` rows
(one per matching ``Webhook``) and ``EmailNotice`` rows (one per person to
tell), never sends anything.

The idempotency contract. Every event has a key ("raised:interrupt:12");
a webhook gets at most one delivery per key and a person at most one
notice per key (unique constraints; a second queuing is ignored). A
delivery or an email is sent by one process at a time: ``claim_deliveries``
and ``claim_emails`` take due rows with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL (SQLite's IMMEDIATE transactions run one writer at a time) and a
conditional UPDATE onto a lease, and no HTTP request or SMTP conversation
is ever made inside a transaction. A process that dies mid-send leaves a
lapsed lease, and the row is sent again: a receiver that must act once
drops a repeated ``Countersign-Delivery`` id (only a crash between its
answer and our record repeats one).

A webhook's body is JSON, ASCII only (every other character escaped), and
is signed exactly as requests to agents are (``protocol.signing``,
``Countersign-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``),
at each try, with the webhook's own secret. Agent-supplied text is data
in the JSON (or plain text in an email), never markup, and bounded
(``MAX_NOTIFY_TEXT_CHARS``). Each body carries ``auditHead`` ``{seq, hash}``,
the audit chain's head as it was queued (its own change's entry included):
a receiver that keeps it anchors the trail outside our database.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone as dt_timezone

import httpx
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from ..conf import MAX_DIGEST_ITEMS, MAX_NOTIFY_TEXT_CHARS, MAX_RESPONSE_EXCERPT, NOTIFY_BATCH, settings
from ..models import (Decision, Delivery, DeliveryAttempt, EmailChoice, EmailNotice, Interrupt,
                      NotificationPreference, NotifyEvent, Run, Webhook)
from ..protocol import signing
from ..live import relay
from . import egress, policies, trail, wakeup
from ..rules import eligibility

logger = logging.getLogger(__name__)

#: Headers every delivery carries besides the signature: what happened, and its once-only id.
EVENT_HEADER = "Countersign-Event"
DELIVERY_HEADER = "Countersign-Delivery"
#: The body's ``version``: a receiver checks it before reading the rest.
BODY_VERSION = 1


def _bounded(text, limit: int = MAX_NOTIFY_TEXT_CHARS) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _at(moment: datetime | None) -> str | None:
    return moment.astimezone(dt_timezone.utc).isoformat().replace("+00:00", "Z") if moment else None


def _link(path: str) -> str:
    return f"{settings.COUNTERSIGN_SELF_URL.rstrip('/')}{path}"


# --- what happened: the producers' calls ---------------------------------------------------------


def raised(run: Run, interrupts: list[Interrupt]) -> None:
    """A run raised ``interrupts`` (saved, pending): webhooks, and an email to each eligible reviewer."""
    if not interrupts:
        return
    for interrupt in interrupts:
        interrupt.run = run
    rules = eligibility.rules_held(interrupts)
    _queue_webhooks(NotifyEvent.RAISED, [(f"raised:interrupt:{i.pk}", i, rules[i.pk], {}) for i in interrupts])
    now = timezone.now()
    # One email per person for the batch, listing what they may decide: a batch of twenty is one message.
    reviewers: dict[eligibility.Rule, list[tuple[int, str]]] = {}
    told: dict[int, tuple[str, list[Interrupt]]] = {}
    for interrupt in interrupts:
        if interrupt.expires_at is not None and interrupt.expires_at <= now:
            continue  # closed as it was raised: nobody can decide it
        rule = rules[interrupt.pk]
        if rule not in reviewers:
            reviewers[rule] = _reviewers(rule, run.requested_by_id, rule.allow_self_approval)
        for pk, choice in reviewers[rule]:
            told.setdefault(pk, (choice, []))[1].append(interrupt)
    _queue_emails(NotifyEvent.RAISED, f"raised:run:{run.pk}", told, now)


def decided(interrupt: Interrupt, user) -> None:
    """``user`` decided (or revised their decision on) ``interrupt``: webhooks only."""
    hooks = _hooks_for(NotifyEvent.DECIDED)
    if not hooks:
        return
    decision = (Decision.objects.filter(interrupt=interrupt, user=user, superseded_at__isnull=True)
                .order_by("-pk").first())
    if decision is None:
        return
    interrupt.status = Interrupt.objects.values_list("status", flat=True).get(pk=interrupt.pk)
    rule = eligibility.rule_for(interrupt)
    extra = {"decision": {
        "id": decision.pk, "by": user.get_username(), "userId": user.pk, "action": decision.action,
        "status": decision.status, "comment": _bounded(decision.comment), "at": _at(decision.created_at),
        "policy": decision.policy, "requiredApprovals": decision.required_approvals,
    }}
    _queue_webhooks(NotifyEvent.DECIDED, [(f"decided:decision:{decision.pk}", interrupt, rule, extra)], hooks)


def expired(run: Run, closed: list[tuple[Interrupt, str]]) -> None:
    """These interrupts of ``run`` closed unanswered (each with why): webhooks only."""
    if not closed:
        return
    for interrupt, reason in closed:
        interrupt.run, interrupt.status, interrupt.closed_reason = run, Interrupt.Status.EXPIRED, reason
    rules = eligibility.rules_held([i for i, _ in closed])
    _queue_webhooks(NotifyEvent.EXPIRED, [(f"expired:interrupt:{i.pk}", i, rules[i.pk], {"closedReason": why})
                                          for i, why in closed])


def escalated(interrupt: Interrupt) -> None:
    """``interrupt`` missed its target and escalated to ``interrupt.escalated_to``: webhooks, and its members."""
    group = interrupt.escalated_to
    rule = eligibility.rule_for(interrupt)
    key = f"escalated:interrupt:{interrupt.pk}"
    extra = {"escalatedTo": group.name if group else None, "escalatedAt": _at(interrupt.escalated_at)}
    _queue_webhooks(NotifyEvent.ESCALATED, [(key, interrupt, rule, extra)])
    if group is not None:
        members = (get_user_model().objects.filter(groups=group, is_active=True).exclude(email="")
                   .exclude(notification_preference__email=EmailChoice.NONE))
        # Only those the escalation lets decide it: members without the permission
        # to decide, or the requester (never their own request), have nothing to do.
        members = members.filter(pk__in=[m.pk for m in members if policies.refusal(m, rule, interrupt) is None])
        _queue_emails(NotifyEvent.ESCALATED, key, {pk: (choice, [interrupt]) for pk, choice in _with_choice(members)},
                      timezone.now())


def refused(run: Run, code: str, message: str) -> None:
    """A resumed run failed (``code``, ``message``): the agent did not take the answers to its parent's batch."""
    hooks = _hooks_for(NotifyEvent.REFUSED)
    if not hooks:
        return
    batch = list(Interrupt.objects.filter(run_id=run.parent_id).select_related("run__agent", "run__thread"))
    rules = eligibility.rules_held(batch)
    refusal = {"runId": run.run_id, "code": _bounded(code, 100), "message": _bounded(message),
               "interrupts": [i.interrupt_id for i in batch]}
    matched = [h for h in hooks if any(_in_scope(h, i, rules[i.pk]) for i in batch) or _unscoped(h)]
    if not matched:
        return
    body = _body(NotifyEvent.REFUSED, f"refused:run:{run.pk}", None, run,
                 {"refusal": refusal, "auditHead": trail.head().as_dict()})
    _insert([Delivery(webhook=h, event=NotifyEvent.REFUSED, key=f"refused:run:{run.pk}", body=body,
                      interrupt=batch[0] if batch else None, next_attempt_at=timezone.now()) for h in matched])


# --- queuing -----------------------------------------------------------------------------------


def _hooks_for(event: str) -> list[Webhook]:
    # Every active webhook, filtered here: a team has a handful, and SQLite cannot filter a JSON list.
    return [h for h in Webhook.objects.filter(active=True) if event in (h.events or [])]


def _unscoped(hook: Webhook) -> bool:
    return hook.group_id is None and hook.policy_id is None


def _in_scope(hook: Webhook, interrupt: Interrupt, rule: eligibility.Rule) -> bool:
    if _unscoped(hook):
        return True
    if hook.policy_id is not None and interrupt.policy_id == hook.policy_id:
        return True
    return hook.group_id is not None and (hook.group_id in rule.group_ids
                                          or interrupt.escalated_to_id == hook.group_id)


def _queue_webhooks(event: str, items: list[tuple[str, Interrupt, eligibility.Rule, dict]],
                    hooks: list[Webhook] | None = None) -> None:
    hooks = _hooks_for(event) if hooks is None else hooks
    if not hooks:
        return
    now = timezone.now()
    rows = []
    anchor = trail.head().as_dict()
    for key, interrupt, rule, extra in items:
        matched = [h for h in hooks if _in_scope(h, interrupt, rule)]
        if matched:
            body = _body(event, key, interrupt, interrupt.run, {"policy": rule.name, **extra, "auditHead": anchor})
            rows += [Delivery(webhook=h, event=event, key=key, body=body, interrupt=interrupt, next_attempt_at=now)
                     for h in matched]
    _insert(rows)


def _insert(rows: list) -> None:
    if rows:
        # A key queued before (the same event reported twice) is kept as it was: once per key.
        type(rows[0]).objects.bulk_create(rows, ignore_conflicts=True)
        if isinstance(rows[0], Delivery):
            relay.deliveries_changed()


def _body(event: str, key: str, interrupt: Interrupt | None, run: Run, extra: dict) -> str:
    """The JSON text of one event, as sent and signed: ids, what happened, agent text bounded."""
    thread, agent = run.thread, run.agent
    document = {
        "version": BODY_VERSION,
        "id": key,
        "type": f"interrupt.{event}",
        "at": _at(timezone.now()),
        "agent": {"name": agent.name},
        "thread": {"threadId": thread.thread_id, "title": _bounded(thread.title, 200),
                   "url": _link(f"/threads/{thread.thread_id}/")},
        "run": {"runId": run.run_id},
        **extra,
    }
    if interrupt is not None:
        document["interrupt"] = {
            "id": interrupt.pk, "interruptId": interrupt.interrupt_id, "status": interrupt.status,
            "reason": _bounded(interrupt.reason, 200), "message": _bounded(interrupt.message),
            "toolName": _bounded(interrupt.tool_name, 200) or None, "toolCallId": interrupt.tool_call_id or None,
            "raisedAt": _at(interrupt.created_at), "expiresAt": _at(interrupt.expires_at),
            "runId": interrupt.run.run_id,
        }
    # ASCII: a lone surrogate or a NUL from an agent is escaped text, storable anywhere and identical when re-sent.
    return json.dumps(document, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def _reviewers(rule: eligibility.Rule, requester_id: int | None, allow_self: bool):
    """(pk, email choice) of everyone ``rule`` admits who has an email address and wants email (one query)."""
    app, codename = eligibility.DECIDE_PERMISSION.split(".")
    holds = (Q(is_superuser=True)
             | Q(user_permissions__codename=codename, user_permissions__content_type__app_label=app)
             | Q(groups__permissions__codename=codename, groups__permissions__content_type__app_label=app))
    users = get_user_model().objects.filter(holds, is_active=True).exclude(email="")
    if rule.names_people:
        users = users.filter(Q(pk__in=rule.user_ids) | Q(groups__in=rule.group_ids))
    if not allow_self and requester_id:
        users = users.exclude(pk=requester_id)
    return _with_choice(users.exclude(notification_preference__email=EmailChoice.NONE))


def _with_choice(users) -> list[tuple[int, str]]:
    return list(users.distinct().values_list("pk", "notification_preference__email"))


def digest_due(now: datetime) -> datetime:
    """When a digest notice queued at ``now`` goes: the end of its COUNTERSIGN_EMAIL_DIGEST_SECONDS period."""
    period = max(1, int(settings.COUNTERSIGN_EMAIL_DIGEST_SECONDS))
    seconds = int(now.timestamp())
    return datetime.fromtimestamp(seconds - seconds % period + period, tz=dt_timezone.utc)


def _clean_line(text: str, limit: int) -> str:
    # A subject is one header line: no line breaks or control characters from an agent.
    return _bounded(" ".join("".join(c if c.isprintable() else " " for c in text).split()), limit)


def _queue_emails(event: str, key: str, told: dict[int, tuple[str, list[Interrupt]]], now) -> None:
    """One notice per person in ``told`` (user pk -> (email choice, the interrupts it is about))."""
    texts: dict[tuple[int, ...], tuple[str, str]] = {}
    rows = []
    for pk, (choice, interrupts) in told.items():
        about = tuple(i.pk for i in interrupts)
        if about not in texts:
            texts[about] = _email_text(event, interrupts)
        subject, text = texts[about]
        digest = choice == EmailChoice.DIGEST
        rows.append(EmailNotice(user_id=pk, key=key, event=event, interrupt=interrupts[0], subject=subject,
                                text=text, digest=digest, due_at=digest_due(now) if digest else now))
    _insert(rows)


def _email_text(event: str, interrupts: list[Interrupt]) -> tuple[str, str]:
    """(subject, plain text) of an email about ``interrupts`` (one run's): agent text bounded, never markup."""
    first = interrupts[0]
    run = first.run
    agent, reason = run.agent.name, _clean_line(first.reason, 100)
    asks = f"{agent} asks for {len(interrupts)} decisions" if len(interrupts) > 1 else \
        f"{agent} asks for a decision ({reason})"
    if event == NotifyEvent.ESCALATED:
        subject = f"Escalated: {asks}"
        lead = (f"This request missed its target time and escalated to "
                f"{first.escalated_to.name if first.escalated_to else 'your team'}.\n\n")
    else:
        subject, lead = asks, ""
    items = "\n".join(f"- {_clean_line(i.reason, 100)}: {_bounded(i.message)} (interrupt {i.interrupt_id})"
                      for i in interrupts[:MAX_DIGEST_ITEMS])
    if len(interrupts) > MAX_DIGEST_ITEMS:
        items += f"\n…and {len(interrupts) - MAX_DIGEST_ITEMS} more"
    text = (f"{lead}{asks}, on thread {run.thread.thread_id}:\n\n{items}\n\n"
            f"Review: {_link(f'/threads/{run.thread.thread_id}/')}\n")
    return _clean_line(subject, 200), text


# --- sending webhooks ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outgoing:
    pk: int
    url: str
    secret: str
    event: str
    key: str
    body: str


@dataclass(frozen=True)
class Answer:
    status: int | None
    excerpt: str
    error: str

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _due(now) -> Q:
    return (Q(status=Delivery.Status.QUEUED, next_attempt_at__lte=now)
            | Q(status=Delivery.Status.SENDING, lease_until__lt=now))


def claim_deliveries(worker: str, limit: int = NOTIFY_BATCH) -> list[Outgoing]:
    """Take up to ``limit`` due deliveries for ``worker`` (queued and due, or sending under a lapsed lease)."""
    now = timezone.now()
    if not Delivery.objects.filter(_due(now)).exists():
        return []  # the usual round: nothing due, and no write lock taken to find out
    with transaction.atomic():
        due = list(Delivery.objects.select_for_update(skip_locked=True).filter(_due(now))
                   .order_by("next_attempt_at", "pk").values_list("pk", flat=True)[:limit])
        if not due:
            return []
        # Conditional on still being due: never taken twice, whatever the database's locking.
        Delivery.objects.filter(_due(now), pk__in=due).update(
            status=Delivery.Status.SENDING, claimed_by=worker, attempts=F("attempts") + 1,
            lease_until=now + timedelta(seconds=settings.COUNTERSIGN_NOTIFY_LEASE_SECONDS))
        rows = (Delivery.objects.filter(pk__in=due, status=Delivery.Status.SENDING, claimed_by=worker)
                .values_list("pk", "webhook__url", "webhook__secret", "event", "key", "body"))
        return [Outgoing(*row) for row in rows]


async def post(client: httpx.AsyncClient, outgoing: Outgoing) -> Answer:
    """POST one delivery, signed now; what the receiver answered, or why nothing arrived."""
    body = outgoing.body.encode("ascii")
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Countersign-Webhook",
        signing.SIGNATURE_HEADER: signing.sign(outgoing.secret, body, int(time.time())),
        EVENT_HEADER: outgoing.event,
        DELIVERY_HEADER: outgoing.key,
    }
    status, read = None, b""
    limit = settings.COUNTERSIGN_WEBHOOK_TIMEOUT
    try:
        # The whole exchange, not each read (httpx's timeout): a receiver dripping its answer a
        # byte at a time would hold every delivery and email of this round behind it.
        async with asyncio.timeout(limit):
            async with client.stream("POST", outgoing.url, content=body, headers=headers) as response:
                status = response.status_code
                async for chunk in response.aiter_bytes():
                    read += chunk
                    if len(read) > MAX_RESPONSE_EXCERPT:
                        break
    except TimeoutError:
        if status is None:
            return Answer(None, "", f"Timeout: no answer within {limit:g} s")
        # It answered: its status stands, with what of its body arrived in time.
    except egress.AgentAddressRefused as refused:
        return Answer(None, "", f"ADDRESS_REFUSED: Countersign does not connect to {refused.host} "
                                f"({refused.address}); COUNTERSIGN_AGENT_NETWORKS governs webhooks too.")
    except httpx.HTTPError as problem:
        return Answer(None, "", _bounded(f"{type(problem).__name__}: {problem}" if str(problem)
                                         else type(problem).__name__, 500))
    excerpt = read[:MAX_RESPONSE_EXCERPT].decode("utf-8", "replace").replace("\x00", "\\u0000")
    if 300 <= status < 400:
        return Answer(status, excerpt, f"HTTP {status}: redirects are never followed; give the final URL.")
    return Answer(status, excerpt, "" if 200 <= status < 300 else f"HTTP {status}")


def retry_delay(attempt: int) -> float:
    """Seconds to wait after failed try number ``attempt`` (1, 2, ...): doubling, capped."""
    return min(settings.COUNTERSIGN_WEBHOOK_RETRY_BASE * 2 ** (attempt - 1),
               settings.COUNTERSIGN_WEBHOOK_RETRY_MAX_DELAY)


def record(outgoing: Outgoing, worker: str, answer: Answer) -> str | None:
    """Settle a try ``worker`` made: delivered, queued again with backoff, or failed; None if no longer ours."""
    now = timezone.now()
    with transaction.atomic():
        held = (Delivery.objects.select_for_update()
                .filter(pk=outgoing.pk, status=Delivery.Status.SENDING, claimed_by=worker)
                .values_list("attempts", "resent_from", "resent_by_id").first())
        if held is None:
            return None  # its lease lapsed and another process took it
        attempts, resent_from, resent_by = held
        fields = {"response_status": answer.status, "response_excerpt": answer.excerpt,
                  "last_error": answer.error, "claimed_by": "", "lease_until": None, "resent_by": None}
        if answer.delivered:
            status = Delivery.Status.DELIVERED
            fields["delivered_at"] = now
        elif attempts - resent_from >= settings.COUNTERSIGN_WEBHOOK_ATTEMPTS:
            status = Delivery.Status.FAILED
        else:
            status = Delivery.Status.QUEUED
            fields["next_attempt_at"] = now + timedelta(seconds=retry_delay(attempts - resent_from))
        Delivery.objects.filter(pk=outgoing.pk).update(status=status, **fields)
        DeliveryAttempt.objects.create(delivery_id=outgoing.pk, number=attempts, at=now,
                                       response_status=answer.status, response_excerpt=answer.excerpt,
                                       error=answer.error, resent_by_id=resent_by)
        relay.deliveries_changed()
    return status


async def post_all(outgoing: list[Outgoing]) -> list[Answer]:
    """POST each delivery at once, through one client: what each receiver answered."""
    timeout = httpx.Timeout(settings.COUNTERSIGN_WEBHOOK_TIMEOUT)
    # The agents' client: checked addresses only, no redirects, no proxy from the environment.
    async with egress.agent_client(timeout) as client:
        return list(await asyncio.gather(*(post(client, item) for item in outgoing)))


# The rounds' database work and email sending run on a thread of their own,
# not on asgiref's one shared thread: requests and streams never queue behind
# a notification round, nor it behind them.
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _released(function, *args):
    try:
        return function(*args)
    finally:
        # This thread never sees a request end, when Django closes connections:
        # PostgreSQL's goes back to the pool after each call, a broken one is closed.
        if not connection.in_atomic_block and (connection.vendor == "postgresql" or connection.errors_occurred):
            connection.close()


async def _off_loop(function, *args):
    global _executor
    if _executor is None:
        with _executor_lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(1, thread_name_prefix="countersign-notify")
    return await asyncio.get_running_loop().run_in_executor(_executor, functools.partial(_released, function, *args))


async def deliver_webhooks(worker: str) -> int:
    """Send every due delivery this process can take; how many were tried."""
    outgoing = await _off_loop(claim_deliveries, worker)
    if not outgoing:
        return 0
    answers = await post_all(outgoing)
    for item, answer in zip(outgoing, answers):
        await _off_loop(record, item, worker, answer)
    return len(outgoing)


def resend(delivery: Delivery, user) -> bool:
    """Queue ``delivery``'s very body again, due now, with a fresh set of tries; False while it is being sent."""
    with transaction.atomic():
        moved = Delivery.objects.filter(pk=delivery.pk).exclude(status=Delivery.Status.SENDING).update(
            status=Delivery.Status.QUEUED, next_attempt_at=timezone.now(), resent_by=user,
            resent_from=F("attempts"), claimed_by="", lease_until=None)
        if moved:
            relay.deliveries_changed()
    if moved:
        transaction.on_commit(wakeup.wake)
    return bool(moved)


# --- sending emails ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mail:
    """One email to send: the notices it carries (one, or a digest's), to whom, and what it says."""

    notices: tuple[int, ...]
    to: str
    subject: str
    text: str


def _email_due(now) -> Q:
    return (Q(status=EmailNotice.Status.QUEUED, due_at__lte=now)
            | Q(status=EmailNotice.Status.SENDING, lease_until__lt=now))


def claim_emails(worker: str, limit: int = NOTIFY_BATCH) -> list[Mail]:
    """Take due emails for ``worker``: immediate notices one email each, a person's due digest notices in one.

    A digest is claimed under its reader's preference row (SKIP LOCKED), so
    two processes never split one person's digest into two emails.
    """
    now = timezone.now()
    lease = {"status": EmailNotice.Status.SENDING, "claimed_by": worker, "attempts": F("attempts") + 1,
             "lease_until": now + timedelta(seconds=settings.COUNTERSIGN_NOTIFY_LEASE_SECONDS)}
    mails: list[Mail] = []
    if not EmailNotice.objects.filter(_email_due(now)).exists():
        return []
    with transaction.atomic():
        # Judged when it goes, not when it was queued: a digest waits a period, and
        # someone deactivated meanwhile (left the team) must not be sent the requests.
        unread = list(EmailNotice.objects.select_for_update(skip_locked=True, of=("self",))
                      .filter(_email_due(now), user__is_active=False).values_list("pk", flat=True)[:limit])
        EmailNotice.objects.filter(_email_due(now), pk__in=unread).update(
            status=EmailNotice.Status.FAILED, claimed_by="", lease_until=None,
            last_error="Not sent: its reader was deactivated before it went.")
        single = list(EmailNotice.objects.select_for_update(skip_locked=True).filter(_email_due(now), digest=False)
                      .order_by("due_at", "pk").values_list("pk", flat=True)[:limit])
        if single:
            EmailNotice.objects.filter(_email_due(now), pk__in=single).update(**lease)
        readers = set(EmailNotice.objects.filter(_email_due(now), digest=True).order_by()
                      .values_list("user_id", flat=True).distinct()[:limit])
        locked = list(NotificationPreference.objects.select_for_update(skip_locked=True)
                      .filter(user_id__in=readers).values_list("user_id", flat=True)) if readers else []
        if locked:
            EmailNotice.objects.filter(_email_due(now), digest=True, user_id__in=locked).update(**lease)
        mine = list(EmailNotice.objects.filter(claimed_by=worker, status=EmailNotice.Status.SENDING)
                    .select_related("user").order_by("pk"))
    digests: dict[int, list[EmailNotice]] = {}
    for notice in mine:
        if notice.digest:
            digests.setdefault(notice.user_id, []).append(notice)
        else:
            mails.append(Mail((notice.pk,), notice.user.email, f"[Countersign] {notice.subject}", notice.text))
    for notices in digests.values():
        shown = notices[:MAX_DIGEST_ITEMS]
        more = len(notices) - len(shown)
        text = (f"{len(notices)} request{'s' if len(notices) != 1 else ''} for you since your last digest:\n\n"
                + "\n----\n\n".join(n.text for n in shown)
                + (f"\n…and {more} more: {_link('/inbox/')}\n" if more else ""))
        mails.append(Mail(tuple(n.pk for n in notices), notices[0].user.email,
                          f"[Countersign] Digest: {len(notices)} request{'s' if len(notices) != 1 else ''}", text))
    return mails


def send(mails: list[Mail]) -> list[str]:
    """Send each email through Django's default mailer (no database here); '' for each sent, else why not."""
    results = []
    try:
        connection = mail.mailers.default
        connection.open()
    except Exception as problem:  # the server is down: every email waits for its next try
        return [_bounded(f"{type(problem).__name__}: {problem}", 500)] * len(mails)
    try:
        for item in mails:
            message = mail.EmailMessage(item.subject, item.text, django_settings.DEFAULT_FROM_EMAIL, [item.to])
            try:
                connection.send_messages([message])
                results.append("")
            except Exception as problem:
                results.append(_bounded(f"{type(problem).__name__}: {problem}", 500))
    finally:
        try:
            connection.close()
        except Exception:
            logger.warning("closing the email connection failed", exc_info=True)
    return results


def record_emails(mails: list[Mail], worker: str, results: list[str]) -> None:
    """Settle each email ``worker`` tried: sent, queued again with backoff, or failed after its tries."""
    now = timezone.now()
    with transaction.atomic():
        for item, error in zip(mails, results):
            ours = EmailNotice.objects.filter(pk__in=item.notices, claimed_by=worker,
                                              status=EmailNotice.Status.SENDING)
            if not error:
                ours.update(status=EmailNotice.Status.DELIVERED, sent_at=now, claimed_by="", lease_until=None,
                            last_error="")
                continue
            for pk, attempts in ours.values_list("pk", "attempts"):
                done = attempts >= settings.COUNTERSIGN_EMAIL_ATTEMPTS
                EmailNotice.objects.filter(pk=pk).update(
                    status=EmailNotice.Status.FAILED if done else EmailNotice.Status.QUEUED,
                    due_at=now + timedelta(seconds=retry_delay(attempts)), claimed_by="", lease_until=None,
                    last_error=error)


def send_due_emails(worker: str) -> int:
    """Claim, send and record due emails (for callers without an event loop); how many emails were tried."""
    mails = claim_emails(worker)
    if mails:
        record_emails(mails, worker, send(mails))
    return len(mails)


async def deliver_due(worker: str) -> None:
    """One round: due webhooks, then due emails; never inside a transaction, never raising."""
    try:
        await deliver_webhooks(worker)
    except Exception:
        logger.exception("delivering webhooks failed")
    try:
        await _off_loop(send_due_emails, worker)
    except Exception:
        logger.exception("sending emails failed")


async def run_forever(worker: str) -> None:
    """The supervisor's notification loop: a round, then a poll interval's rest, until cancelled."""
    while True:
        await deliver_due(worker)
        await asyncio.sleep(settings.COUNTERSIGN_POLL_INTERVAL)


# --- preferences ---------------------------------------------------------------------------------


def email_choice(user) -> str:
    """How ``user`` hears of requests by email (no choice made: immediate)."""
    found = NotificationPreference.objects.filter(user=user).values_list("email", flat=True).first()
    return found or EmailChoice.IMMEDIATE


def choose_email(user, choice: str) -> None:
    """Record ``user``'s choice: immediate, digest or none; it applies to what is queued from now on."""
    if choice not in EmailChoice.values:
        raise ValueError(f"{choice!r} is not one of {', '.join(EmailChoice.values)}")
    NotificationPreference.objects.update_or_create(user=user, defaults={"email": choice})
