"""The audit trail: a hash chain of entries, and how far it was last verified."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from ..protocol.trail import GENESIS as AUDIT_GENESIS
from .interrupts import Decision, Interrupt


class AuditEntry(models.Model):
    """One link of the hash chain over decisions, expiries and changes to policies and agents.

    ``hash`` is ``sha256:`` + SHA-256 of ``prev_hash`` then ``content`` (RFC 8785
    JSON text, as hashed). Append-only in the database (migration 0011); only
    ``trail.record`` writes entries. The format: docs/internals/models.md.
    """

    seq = models.PositiveBigIntegerField(unique=True)
    kind = models.CharField(max_length=40)
    # What the entry is about, as text that survives the row: "decision:12", "agent:3".
    subject = models.CharField(max_length=100)
    decision = models.ForeignKey(Decision, null=True, blank=True, on_delete=models.DO_NOTHING,
                                 db_constraint=False, related_name="audit_entries")
    interrupt = models.ForeignKey(Interrupt, null=True, blank=True, on_delete=models.DO_NOTHING,
                                  db_constraint=False, related_name="audit_entries")
    content = models.TextField()
    prev_hash = models.CharField(max_length=71)
    hash = models.CharField(max_length=71)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["seq"]
        verbose_name_plural = "audit entries"
        constraints = [models.CheckConstraint(condition=Q(seq__gte=1), name="audit_seq_positive")]
        indexes = [models.Index(fields=["subject", "seq"], name="audit_subject_seq")]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} {self.subject}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise ValueError("Audit entries are append-only: an entry is never changed.")
        super().save(*args, **kwargs)


class AuditCheckpoint(models.Model):
    """The last verification of the trail: the chain was intact through ``seq``, whose hash was ``hash``.

    One row (pk 1): the audit page shows how far the trail is verified without
    recomputing it, and a trail rewritten below ``seq`` shows (its hash changes).
    """

    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=71, default=AUDIT_GENESIS)
    verified_at = models.DateTimeField()
    # Whether that verification also cross-checked every decision and expiry
    # against its entry (``manage.py audit verify``), or only the links.
    complete = models.BooleanField(default=False)
    # What that verification found wrong (the first broken entry first), or "".
    problem = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"trail verified through #{self.seq}"
