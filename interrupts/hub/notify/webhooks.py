"""Send queued webhook deliveries: claim under a lease, POST signed, record the answer, retry with backoff."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta

import httpx
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from ...conf import MAX_RESPONSE_EXCERPT, NOTIFY_BATCH, settings
from ...live import relay
from ...models import Delivery, DeliveryAttempt
from ...protocol import signing
from .. import egress, wakeup
from .enqueue import bounded

#: Headers every delivery carries besides the signature: what happened, and its once-only id.
EVENT_HEADER = "Countersign-Event"
DELIVERY_HEADER = "Countersign-Delivery"


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
        return Answer(None, "", bounded(f"{type(problem).__name__}: {problem}" if str(problem)
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
