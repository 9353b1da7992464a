"""Queue notifications inside the change they report: webhook deliveries and email notices, never sent here.

Producers (``log``, ``decisions``, ``escalation``) call ``raised``, ``decided``, ``expired``,
``refused`` and ``escalated`` in the transaction that makes the change; docs/internals/notify.md
has the idempotency contract.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from ...conf import MAX_DIGEST_ITEMS, MAX_NOTIFY_TEXT_CHARS, settings
from ...live import relay
from ...models import Decision, Delivery, EmailChoice, EmailNotice, Interrupt, NotifyEvent, Run, Webhook
from ...rules import eligibility
from .. import policies
from ..trail import chain

#: The body's ``version``: a receiver checks it before reading the rest.
BODY_VERSION = 1


def bounded(text, limit: int = MAX_NOTIFY_TEXT_CHARS) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def iso_time(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z") if moment else None


def link(path: str) -> str:
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
        "status": decision.status, "comment": bounded(decision.comment), "at": iso_time(decision.created_at),
        "policy": decision.policy, "requiredApprovals": decision.required_approvals,
        # A standing grant took it in ``by``'s name.
        "grant": decision.grant_id,
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
    extra = {"escalatedTo": group.name if group else None, "escalatedAt": iso_time(interrupt.escalated_at)}
    _queue_webhooks(NotifyEvent.ESCALATED, [(key, interrupt, rule, extra)])
    if group is not None:
        members = (get_user_model().objects.filter(groups=group, is_active=True).exclude(email="")
                   .exclude(notification_preference__email=EmailChoice.NONE))
        # Only those the escalation lets decide it: members without the permission
        # to decide, or the requester (never their own request), have nothing to do.
        members = members.filter(pk__in=[m.pk for m in members if policies.refusal(m, rule, interrupt) is None])
        _queue_emails(NotifyEvent.ESCALATED, key, {pk: (choice, [interrupt]) for pk, choice in _with_choice(members)},
                      timezone.now())


def expiring(interrupt: Interrupt) -> None:
    """``interrupt`` expires soon, unanswered: webhooks, and an email to each person who may decide it."""
    rule = eligibility.rule_for(interrupt)
    key = f"expiring:interrupt:{interrupt.pk}"
    _queue_webhooks(NotifyEvent.EXPIRING, [(key, interrupt, rule, {"expiresAt": iso_time(interrupt.expires_at)})])
    told = {pk: (choice, [interrupt]) for pk, choice in
            _reviewers(rule, interrupt.run.requested_by_id, rule.allow_self_approval)}
    _queue_emails(NotifyEvent.EXPIRING, key, told, timezone.now())


def refused(run: Run, code: str, message: str) -> None:
    """A resumed run failed (``code``, ``message``): the agent did not take the answers to its parent's batch."""
    hooks = _hooks_for(NotifyEvent.REFUSED)
    if not hooks:
        return
    batch = list(Interrupt.objects.filter(run_id=run.parent_id).select_related("run__agent", "run__thread"))
    rules = eligibility.rules_held(batch)
    refusal = {"runId": run.run_id, "code": bounded(code, 100), "message": bounded(message),
               "interrupts": [i.interrupt_id for i in batch]}
    matched = [h for h in hooks if any(_in_scope(h, i, rules[i.pk]) for i in batch) or _unscoped(h)]
    if not matched:
        return
    body = _body(NotifyEvent.REFUSED, f"refused:run:{run.pk}", None, run,
                 {"refusal": refusal, "auditHead": chain.head().as_dict()})
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
    anchor = chain.head().as_dict()
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
        "at": iso_time(timezone.now()),
        "agent": {"name": agent.name},
        "thread": {"threadId": thread.thread_id, "title": bounded(thread.title, 200),
                   "url": link(f"/threads/{thread.thread_id}/")},
        "run": {"runId": run.run_id},
        **extra,
    }
    if interrupt is not None:
        document["interrupt"] = {
            "id": interrupt.pk, "interruptId": interrupt.interrupt_id, "status": interrupt.status,
            "reason": bounded(interrupt.reason, 200), "message": bounded(interrupt.message),
            "toolName": bounded(interrupt.tool_name, 200) or None, "toolCallId": interrupt.tool_call_id or None,
            "raisedAt": iso_time(interrupt.created_at), "expiresAt": iso_time(interrupt.expires_at),
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
    return datetime.fromtimestamp(seconds - seconds % period + period, tz=UTC)


def clean_line(text: str, limit: int) -> str:
    # A subject is one header line: no line breaks or control characters from an agent.
    return bounded(" ".join("".join(c if c.isprintable() else " " for c in text).split()), limit)


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
    agent, reason = run.agent.name, clean_line(first.reason, 100)
    asks = f"{agent} asks for {len(interrupts)} decisions" if len(interrupts) > 1 else \
        f"{agent} asks for a decision ({reason})"
    if event == NotifyEvent.EXPIRING:
        subject = f"Expiring soon: {asks}"
        lead = (f"Unanswered, this request expires at {first.expires_at:%Y-%m-%d %H:%M} UTC: {agent} will then be "
                "told it was cancelled as expired.\n\n")
    elif event == NotifyEvent.ESCALATED:
        subject = f"Escalated: {asks}"
        lead = (f"This request missed its target time and escalated to "
                f"{first.escalated_to.name if first.escalated_to else 'your team'}.\n\n")
    else:
        subject, lead = asks, ""
    items = "\n".join(f"- {clean_line(i.reason, 100)}: {bounded(i.message)} (interrupt {i.interrupt_id})"
                      for i in interrupts[:MAX_DIGEST_ITEMS])
    if len(interrupts) > MAX_DIGEST_ITEMS:
        items += f"\n…and {len(interrupts) - MAX_DIGEST_ITEMS} more"
    text = (f"{lead}{asks}, on thread {run.thread.thread_id}:\n\n{items}\n\n"
            f"Review: {link(f'/threads/{run.thread.thread_id}/')}\n")
    return clean_line(subject, 200), text
