"""Send queued email notices (one each, or a reader's digest), and each person's email preference."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings as django_settings
from django.core import mail
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from ...conf import MAX_DIGEST_ITEMS, NOTIFY_BATCH, settings
from ...models import EmailChoice, EmailNotice, Interrupt, NotificationPreference, NotifyEvent
from ...rules import eligibility
from .. import links
from .enqueue import bounded, clean_line, link
from .webhooks import retry_delay

logger = logging.getLogger(__name__)
#: Requests of one run an email links to at most (the rest: the inbox).
MAX_LINKED = 5

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
                    .select_related("user", "interrupt").order_by("pk"))
    digests: dict[int, list[EmailNotice]] = {}
    for notice in mine:
        if notice.digest:
            digests.setdefault(notice.user_id, []).append(notice)
        else:
            mails.append(Mail((notice.pk,), notice.user.email, f"[Countersign] {notice.subject}",
                              notice.text + _decision_links(notice, now)))
    for notices in digests.values():
        shown = notices[:MAX_DIGEST_ITEMS]
        more = len(notices) - len(shown)
        text = (f"{len(notices)} request{'s' if len(notices) != 1 else ''} for you since your last digest:\n\n"
                + "\n----\n\n".join(n.text + _decision_links(n, now) for n in shown)
                + (f"\n…and {more} more: {link('/inbox/')}\n" if more else ""))
        mails.append(Mail(tuple(n.pk for n in notices), notices[0].user.email,
                          f"[Countersign] Digest: {len(notices)} request{'s' if len(notices) != 1 else ''}", text))
    return mails


#: Notices about requests still waiting for their reader: their emails carry decision links.
DECIDABLE = (NotifyEvent.RAISED, NotifyEvent.EXPIRING, NotifyEvent.ESCALATED)


def _decision_links(notice: EmailNotice, now) -> str:
    """The Approve, Reject and Open links of each request of ``notice``'s run its reader may still decide.

    Minted now, as the email goes: the notice's stored text never holds a token.
    """
    if notice.event not in DECIDABLE or notice.interrupt_id is None:
        return ""
    pending = list(Interrupt.objects.filter(run_id=notice.interrupt.run_id, status=Interrupt.Status.PENDING)
                   .select_related("run").order_by("pk")[:MAX_LINKED])
    rules = eligibility.rules_held(pending)
    theirs = [i for i in pending if eligibility.may_decide(notice.user, rules[i.pk], i)]
    if not theirs:
        return ""
    # No Approve link where approving happens on the card (a passkey, a form).
    on_card = {i.pk: why for i in theirs if (why := links.approve_on_card(i, rules[i.pk]))}
    with transaction.atomic():
        urls = links.mint(notice.user, [(i, ("reject", "open") if i.pk in on_card else ("approve", "reject", "open"))
                                        for i in theirs], now)
    hours = settings.COUNTERSIGN_DECISION_LINK_HOURS
    lines = [f"\nDecide from here. Each link opens a page where you confirm what it does; it works once, only "
             f"for you, for {hours:g} hours.\n"]
    for interrupt in theirs:
        found = urls[interrupt.pk]
        approve = (f"  Approve: {found['approve']}\n" if "approve" in found
                   else f"  Approve: in your inbox, {on_card[interrupt.pk]}\n")
        lines.append(f"- {clean_line(interrupt.message or interrupt.interrupt_id, 120)}\n"
                     f"{approve}  Reject: {found['reject']}\n  Open: {found['open']}")
    return "\n".join(lines) + "\n"


def send(mails: list[Mail]) -> list[str]:
    """Send each email through Django's default mailer (no database here); '' for each sent, else why not."""
    results = []
    try:
        connection = mail.mailers.default
        connection.open()
    except Exception as problem:  # the server is down: every email waits for its next try
        return [bounded(f"{type(problem).__name__}: {problem}", 500)] * len(mails)
    try:
        for item in mails:
            message = mail.EmailMessage(item.subject, item.text, django_settings.DEFAULT_FROM_EMAIL, [item.to])
            try:
                connection.send_messages([message])
                results.append("")
            except Exception as problem:
                results.append(bounded(f"{type(problem).__name__}: {problem}", 500))
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
        for item, error in zip(mails, results, strict=False):
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


def email_choice(user) -> str:
    """How ``user`` hears of requests by email (no choice made: immediate)."""
    found = NotificationPreference.objects.filter(user=user).values_list("email", flat=True).first()
    return found or EmailChoice.IMMEDIATE


def choose_email(user, choice: str) -> None:
    """Record ``user``'s choice: immediate, digest or none; it applies to what is queued from now on."""
    if choice not in EmailChoice.values:
        raise ValueError(f"{choice!r} is not one of {', '.join(EmailChoice.values)}")
    NotificationPreference.objects.update_or_create(user=user, defaults={"email": choice})
