"""Claims and presence: who is reviewing a card, and who has it open right now.

A claim says "I am on this one" so two reviewers do not work the same card
unknowingly. It bars nobody: a colleague who decides a card someone else
holds is asked to confirm first (``refuse_if_claimed``), and a claim lapses
on its own COUNTERSIGN_CLAIM_IDLE_SECONDS after its holder last touched it
(claimed it, or had it open), or ends when released, taken over, or the card
is decided. Taking, releasing, taking over and lapsing are each an audit
entry.

Presence is lighter: a page says which cards it has open (over its inbox
socket), and each is a row renewed by the page and removed when the socket
closes. Rows, not one process's memory: with several processes a reviewer
and their colleague rarely share one. A row older than
COUNTERSIGN_PRESENCE_SECONDS is stale (a page that died without closing).

Every change is told to open inboxes twice: ``relay.attention`` patches the
card in place (even one someone is working on, which a list refresh keeps),
and ``relay.inbox_changed`` lets the API's and the list's readers catch up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ..conf import MAX_PRESENCE_CARDS, settings
from ..live import relay
from ..models import Interrupt, Presence
from ..rules import eligibility
from . import policies
from .refusals import Refusal
from .trail import chain

CLAIM_TAKEN = "claim.taken"
CLAIM_RELEASED = "claim.released"
CLAIM_LAPSED = "claim.lapsed"


def _name(user) -> str:
    return user.get_full_name() or user.get_username()


def _idle() -> timedelta:
    return timedelta(seconds=settings.COUNTERSIGN_CLAIM_IDLE_SECONDS)


def _fresh() -> timedelta:
    return timedelta(seconds=settings.COUNTERSIGN_PRESENCE_SECONDS)


def live_claims(now: datetime | None = None) -> Q:
    """A filter on interrupts: those pending under a claim that has not lapsed."""
    now = now or timezone.now()
    return Q(status=Interrupt.Status.PENDING, claimed_by__isnull=False, claim_renewed_at__gt=now - _idle())


def holder(interrupt: Interrupt, now: datetime | None = None):
    """Who holds a live claim on ``interrupt`` (its ``claimed_by`` must be loaded or loadable), or None.

    A deactivated holder holds nothing: they can no longer work on it, and
    colleagues must not be asked to confirm against them.
    """
    now = now or timezone.now()
    if (interrupt.status != Interrupt.Status.PENDING or interrupt.claimed_by_id is None
            or interrupt.claim_renewed_at is None or interrupt.claim_renewed_at <= now - _idle()):
        return None
    return interrupt.claimed_by if interrupt.claimed_by.is_active else None


@dataclass(frozen=True)
class Claim:
    """A live claim as pages and the API show it."""

    by: str  # username
    name: str  # as people read it
    since: datetime
    lapses_at: datetime

    def as_json(self) -> dict:
        return {"by": self.by, "name": self.name, "since": self.since.isoformat(),
                "lapses_at": self.lapses_at.isoformat()}


def shown(interrupt: Interrupt, now: datetime | None = None) -> Claim | None:
    """``interrupt``'s live claim, or None."""
    user = holder(interrupt, now)
    if user is None:
        return None
    return Claim(user.get_username(), _name(user), interrupt.claimed_at, interrupt.claim_renewed_at + _idle())


def refuse_if_claimed(interrupt: Interrupt, user, confirmed: bool, now: datetime | None = None) -> None:
    """Refuse ``CLAIMED`` (409) when someone else holds a live claim on ``interrupt`` and ``user`` did not confirm."""
    other = holder(interrupt, now)
    if other is None or other.pk == user.pk or confirmed:
        return
    raise Refusal("CLAIMED", f"{_name(other)} is reviewing interrupt {interrupt.interrupt_id} (claimed "
                             f"{interrupt.claimed_at:%H:%M} UTC). Confirm to decide it anyway.",
                  interrupt_id=interrupt.interrupt_id, claimed_by=other.get_username())


def _content(interrupt: Interrupt, user, **more) -> dict:
    return {"interrupt": interrupt.pk, "interruptId": interrupt.interrupt_id, "run": interrupt.run.run_id,
            "user": {"id": user.pk, "username": user.get_username()} if user is not None else None, **more}


def viewers(pks: list[int]) -> dict[int, list[tuple[str, str]]]:
    """Who has each of these cards open now: pk → [(username, name)], sorted, in one query."""
    fresh = timezone.now() - _fresh()
    found: dict[int, set[tuple[str, str]]] = {}
    for pk, username, first, last in (Presence.objects.filter(interrupt_id__in=pks, seen_at__gt=fresh)
                                      .values_list("interrupt_id", "user__username", "user__first_name",
                                                   "user__last_name")):
        found.setdefault(pk, set()).add((username, f"{first} {last}".strip() or username))
    return {pk: sorted(people) for pk, people in found.items()}


def attention(pk: int) -> dict:
    """What open inboxes hear about one card: its live claim, and who has it open."""
    interrupt = Interrupt.objects.select_related("claimed_by").filter(pk=pk).first()
    found = shown(interrupt) if interrupt is not None else None
    return {"claim": found.as_json() if found else None,
            "viewers": [{"by": by, "name": name} for by, name in viewers([pk]).get(pk, [])]}


def _told(interrupt: Interrupt) -> None:
    relay.attention(interrupt.pk, attention)
    relay.inbox_changed(interrupt.run.thread_id, 0, relay.Reason.CLAIMED)


def claim(interrupt: Interrupt, user, *, take_over: bool = False) -> Claim:
    """``user`` claims ``interrupt`` (pending, and theirs to decide); returns the claim.

    Refused like a decision when they may not decide it (``NOT_ELIGIBLE``,
    ``SELF_APPROVAL``), ``CLOSED`` when it is no longer pending, and
    ``CLAIMED`` when a colleague holds it, unless ``take_over``. Claiming
    one's own claim again renews it. The race between two claimers is
    decided by a conditional UPDATE: the loser is told who won.
    """
    now = timezone.now()
    current = Interrupt.objects.select_related("run", "claimed_by").get(pk=interrupt.pk)
    policies.refuse_unless_eligible(user, eligibility.rule_for(current), current)
    if current.status != Interrupt.Status.PENDING:
        raise Refusal("CLOSED", f"Interrupt {current.interrupt_id} is no longer pending: there is nothing to claim.",
                      interrupt_id=current.interrupt_id)
    other = holder(current, now)
    if other is not None and other.pk != user.pk and not take_over:
        raise _held_by(other, current)
    with transaction.atomic(durable=True):
        # Only if nobody claimed it meanwhile (or it is still the claim read above).
        unchanged = Q(claimed_by__isnull=True) if current.claimed_by_id is None else Q(
            claimed_by_id=current.claimed_by_id, claimed_at=current.claimed_at)
        renewing = other is not None and other.pk == user.pk
        fields = {"claim_renewed_at": now} if renewing else {
            "claimed_by": user, "claimed_at": now, "claim_renewed_at": now}
        if not Interrupt.objects.filter(unchanged, pk=current.pk, status=Interrupt.Status.PENDING).update(**fields):
            current = Interrupt.objects.select_related("run", "claimed_by").get(pk=current.pk)
            if current.status != Interrupt.Status.PENDING:
                raise Refusal("CLOSED", f"Interrupt {current.interrupt_id} was decided meanwhile.",
                              interrupt_id=current.interrupt_id)
            raise _held_by(holder(current, now), current)
        if not renewing:
            chain.record(CLAIM_TAKEN, _content(current, user, takenFrom=other.get_username() if other else None),
                         subject=f"interrupt:{current.pk}", interrupt=current)
            _told(current)
        since = current.claimed_at if renewing else now
    return Claim(user.get_username(), _name(user), since, now + _idle())


def _held_by(other, interrupt: Interrupt) -> Refusal:
    # Said to someone claiming: what they may do is take it over, not "decide anyway".
    who = _name(other) if other is not None else "A colleague"
    return Refusal("CLAIMED", f"{who} is reviewing interrupt {interrupt.interrupt_id}: take it over to claim it.",
                   interrupt_id=interrupt.interrupt_id,
                   **({"claimed_by": other.get_username()} if other is not None else {}))


def release(interrupt: Interrupt, user) -> None:
    """``user`` gives up their claim on ``interrupt``; staff may release anyone's.

    ``NOT_CLAIMED`` when there is none.
    """
    now = timezone.now()
    current = Interrupt.objects.select_related("run", "claimed_by").get(pk=interrupt.pk)
    other = holder(current, now)
    if other is None:
        raise Refusal("NOT_CLAIMED", f"Nobody is reviewing interrupt {current.interrupt_id}: there is no claim "
                                     "to release.", interrupt_id=current.interrupt_id)
    if other.pk != user.pk and not user.is_staff:
        raise Refusal("CLAIMED", f"{_name(other)} holds the claim on interrupt {current.interrupt_id}; only they "
                                 "(or staff) may release it.", status=403, interrupt_id=current.interrupt_id,
                      claimed_by=other.get_username())
    with transaction.atomic(durable=True):
        if Interrupt.objects.filter(pk=current.pk, claimed_by=other, claimed_at=current.claimed_at).update(
                claimed_by=None, claimed_at=None, claim_renewed_at=None):
            chain.record(CLAIM_RELEASED, _content(current, user, holder=other.get_username()),
                         subject=f"interrupt:{current.pk}", interrupt=current)
            _told(current)


def lapse_due(now: datetime | None = None) -> int:
    """End every claim idle past COUNTERSIGN_CLAIM_IDLE_SECONDS (the supervisor's sweep); returns how many.

    Each lapse is a conditional UPDATE on the claim read, so with several
    processes sweeping at once each claim lapses, and is recorded, once.
    """
    now = now or timezone.now()
    # A closed card's claim ends with it (it was its decision, expiry or failure that ended the work):
    # cleared now, not when it would have lapsed, so a card reopened later shows no claim from before.
    lapsed = Interrupt.objects.filter(claimed_by__isnull=False).exclude(status=Interrupt.Status.PENDING).update(
        claimed_by=None, claimed_at=None, claim_renewed_at=None)
    due = (Interrupt.objects.filter(claimed_by__isnull=False, claim_renewed_at__lte=now - _idle())
           .select_related("run", "claimed_by")[:500])
    for interrupt in due:
        with transaction.atomic(durable=True):
            if not Interrupt.objects.filter(pk=interrupt.pk, claimed_by_id=interrupt.claimed_by_id,
                                            claim_renewed_at=interrupt.claim_renewed_at).update(
                    claimed_by=None, claimed_at=None, claim_renewed_at=None):
                continue  # renewed, released or lapsed by another process meanwhile
            if interrupt.status == Interrupt.Status.PENDING:
                chain.record(CLAIM_LAPSED, _content(interrupt, None, holder=interrupt.claimed_by.get_username(),
                                                    idleSeconds=settings.COUNTERSIGN_CLAIM_IDLE_SECONDS),
                             subject=f"interrupt:{interrupt.pk}", interrupt=interrupt)
                _told(interrupt)
            lapsed += 1
    # Presence rows of pages that died without closing their socket.
    stale = Presence.objects.filter(seen_at__lte=now - _fresh())
    if stale.exists():  # a read first: on SQLite every write takes the whole database's lock
        stale.delete()
    return lapsed


# --- presence ---------------------------------------------------------------------------


def viewing(user, socket: str, pks: Iterable[int]) -> set[int]:
    """The socket ``socket`` of ``user`` has (only) these pending cards open now.

    Returns every card whose viewers changed.

    Renews the rows it keeps, and ``user``'s own live claims on the cards
    they have open that they may still decide: having a claimed card open is
    working on it. ``user`` is read again (a socket's user keeps the groups
    and permissions it connected with): one deactivated has nothing open, and
    one who lost the right to decide a card lets its claim lapse.
    """
    now = timezone.now()
    user = get_user_model().objects.filter(pk=user.pk, is_active=True).first()
    found = list(Interrupt.objects.filter(pk__in=list(pks)[:MAX_PRESENCE_CARDS], status=Interrupt.Status.PENDING)
                 .select_related("run")) if user is not None else []
    wanted = {i.pk for i in found}
    renewed = [i.pk for i in found if i.claimed_by_id == user.pk
               and policies.refusal(user, eligibility.rule_for(i), i) is None] if found else []
    with transaction.atomic(durable=True):
        held = set(Presence.objects.filter(socket=socket).values_list("interrupt_id", flat=True))
        gone = held - wanted
        if gone:
            Presence.objects.filter(socket=socket, interrupt_id__in=gone).delete()
        if held & wanted:
            Presence.objects.filter(socket=socket, interrupt_id__in=held & wanted).update(seen_at=now)
        Presence.objects.bulk_create([Presence(user=user, interrupt_id=pk, socket=socket, seen_at=now)
                                      for pk in wanted - held], ignore_conflicts=True)
        if renewed:
            Interrupt.objects.filter(live_claims(now), pk__in=renewed, claimed_by=user).update(claim_renewed_at=now)
        changed = gone | (wanted - held)
        for pk in changed:
            relay.attention(pk, attention)
    return changed


def left(socket: str) -> set[int]:
    """The socket closed: it has nothing open any more."""
    with transaction.atomic(durable=True):
        gone = set(Presence.objects.filter(socket=socket).values_list("interrupt_id", flat=True))
        Presence.objects.filter(socket=socket).delete()
        for pk in gone:
            relay.attention(pk, attention)
    return gone
