"""Where interrupts, runs and decisions change state: one conditional UPDATE per transition.

Each method narrows the queryset it is called on (the caller's pk, and any
condition of its own race) to the rows the transition may move, and moves
them in one statement. An interrupt's status change and its ``version`` bump
are written together here and nowhere else: ``version`` is what concurrent
deciders compare (``decisions._take``), so a change that forgot it would let a
stale reader win. Each returns how many rows moved; 0 means it lost.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F


class InterruptQuerySet(models.QuerySet):
    def answer(self, version: int, status: str | None = None, now=None) -> int:
        """Count an answer on a pending interrupt read at ``version``; with ``status``, close it so."""
        change = {"status": status, "closed_at": now} if status is not None else {}
        return self.filter(status=self.model.Status.PENDING, version=version).update(
            version=F("version") + 1, **change)

    def revise(self, status: str) -> int:
        """A decided interrupt's answer replaced: its status follows the new one."""
        return self.update(status=status, version=F("version") + 1)

    def reopen(self) -> int:
        """Pending again, as if never closed."""
        return self.update(status=self.model.Status.PENDING, closed_at=None, closed_reason="",
                           version=F("version") + 1)

    def close(self, status: str, reason: str, now) -> int:
        """Closed without a decision of its own (cancelled, expired), saying why."""
        return self.update(status=status, closed_at=now, closed_reason=reason, version=F("version") + 1)

    def expire(self, reason: str, now) -> int:
        """A pending interrupt past its expiresAt, closed as expired."""
        return self.filter(status=self.model.Status.PENDING).close(self.model.Status.EXPIRED, reason, now)

    def cancel_pending(self, reason: str, now) -> int:
        """Every pending one closed as cancelled (its run failed)."""
        return self.filter(status=self.model.Status.PENDING).close(self.model.Status.CANCELLED, reason, now)


class RunQuerySet(models.QuerySet):
    def finish(self, **fields) -> int:
        """A streaming run ended as its terminal event says (``fields``); one settled elsewhere keeps its end."""
        return self.filter(status=self.model.Status.STREAMING).update(**fields)

    def claim(self, worker: str, now, lease_until) -> int:
        """Queued runs taken by ``worker`` to stream."""
        status = self.model.Status
        return self.filter(status=status.QUEUED).update(
            status=status.STREAMING, claimed_by=worker, started_at=now, retry_at=None, lease_until=lease_until)

    def requeue(self, worker: str, **fields) -> int:
        """A run ``worker`` streams queued again, nothing of this try kept (``fields``: why, and when it is due)."""
        status = self.model.Status
        return self.filter(status=status.STREAMING, claimed_by=worker).update(
            status=status.QUEUED, claimed_by="", lease_until=None, started_at=None, sent_at=None, **fields)

    def fail(self, code: str, message: str, fault: str, now) -> int:
        """A run not yet ended (queued or streaming) failed with Countersign's own error."""
        status = self.model.Status
        return self.filter(status__in=[status.QUEUED, status.STREAMING]).update(
            status=status.FAILED, error_code=code[:100], error_message=message, fault=fault,
            finished_at=now, lease_until=None)

    def settle(self, settlement: str, user, now) -> int:
        """A refused answer dealt with, once: a second settler loses."""
        return self.filter(settlement="").update(settlement=settlement, settled_by=user, settled_at=now)


class DecisionQuerySet(models.QuerySet):
    def supersede(self, now) -> int:
        """Live decisions no longer stand (the one change a decision row accepts, and only once)."""
        return self.filter(superseded_at__isnull=True).update(superseded_at=now)


class GrantQuerySet(models.QuerySet):
    def usable(self, now) -> models.QuerySet:
        """Grants that may approve a call now: not revoked, not past their end, uses left."""
        return self.filter(revoked_at__isnull=True, expires_at__gt=now).filter(
            models.Q(max_uses__isnull=True) | models.Q(uses__lt=F("max_uses")))

    def use(self, now) -> int:
        """Spend one use of a grant still usable: 0 when it was revoked, ended or used up meanwhile."""
        return self.usable(now).update(uses=F("uses") + 1)

    def revoke(self, user, now) -> int:
        """Stop a grant that is not revoked yet; its next use is refused."""
        return self.filter(revoked_at__isnull=True).update(revoked_at=now, revoked_by=user)
