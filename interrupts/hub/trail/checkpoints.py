"""Walk the links, and hold them to heads kept elsewhere: the last checkpoint, anchors, webhook deliveries."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from ...conf import MAX_AUDIT_PROBLEMS as MAX_PROBLEMS
from ...models import AuditCheckpoint, AuditEntry, Delivery
from .chain import GENESIS, Head, entries, entry_hash

logger = logging.getLogger(__name__)


@dataclass
class Problem:
    """One thing verification found wrong; ``seq`` is the entry it concerns, when there is one."""

    seq: int | None
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass
class Verification:
    """What ``verify`` found: how many entries hold, the head, and the problems, the first broken entry first."""

    entries: int = 0
    head_seq: int = 0
    head_hash: str = GENESIS
    problems: list[Problem] = field(default_factory=list)
    more: int = 0  # problems past MAX_PROBLEMS, counted only

    @property
    def ok(self) -> bool:
        """Whether nothing was found wrong."""
        return not self.problems

    @property
    def first(self) -> Problem | None:
        """The first broken or missing entry (or row), the one to look at first."""
        return self.problems[0] if self.problems else None

    def add(self, problem: Problem) -> None:
        """Note a problem, keeping at most MAX_PROBLEMS."""
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)
        else:
            self.more += 1


def walk(result: Verification, after: int, prev_hash: str, limit: int | None = None,
          progress: Callable[[int], None] | None = None) -> Problem | None:
    """Check the links from entry ``after + 1``; extend ``result``'s head; return the first break, if any."""
    expected = after + 1
    for seq, kind, subject, content, stored_prev, stored_hash, created_at in entries(after):
        if limit is not None and result.entries >= limit:
            return None
        if seq != expected:
            return Problem(expected, f"entry {expected} is missing: the chain goes from entry {expected - 1} to {seq}")
        if entry_hash(stored_prev, content) != stored_hash:
            return Problem(seq, f"entry {seq} is broken: its hash does not match its content (the entry was edited)")
        try:
            said = json.loads(content)
            same = (said["seq"], said["kind"], said["subject"]) == (seq, kind, subject) and \
                datetime.fromisoformat(said["at"]) == created_at
        except (ValueError, KeyError, TypeError):
            said, same = {}, False
        if said.get("seq") not in (None, seq):
            return Problem(seq, f"entry {seq} is out of place: its content says it is entry {said['seq']} "
                                "(entries were reordered)")
        if stored_prev != prev_hash:
            return Problem(seq, f"entry {seq} is broken: its prev_hash is not entry {seq - 1}'s hash "
                                "(an entry before it was changed, removed or moved)")
        if not same:
            return Problem(seq, f"entry {seq} is broken: its seq, kind, subject or time differ from its content")
        prev_hash, expected = stored_hash, seq + 1
        result.entries += 1
        result.head_seq, result.head_hash = seq, stored_hash
        if progress and result.entries % 10_000 == 0:
            progress(result.entries)
    return None


def against_anchor(anchor: Head) -> Problem | None:
    # The database alone cannot show its newest entries gone, nor a chain
    # recomputed whole: a head kept outside it can.
    if anchor.seq == 0:
        return None
    stored = AuditEntry.objects.filter(seq=anchor.seq).values_list("hash", flat=True).first()
    if stored is None:
        last = AuditEntry.objects.aggregate(last=Max("seq"))["last"] or 0
        if last >= anchor.seq:
            return Problem(anchor.seq, f"entry {anchor.seq}, the head expected ({anchor}), is missing "
                                       "(entries were removed from the middle of the chain)")
        return Problem(anchor.seq, f"entry {anchor.seq}, the head expected ({anchor}), is missing: the trail ends "
                                   f"at entry {last}, so its newest {anchor.seq - last} entries were deleted")
    if stored != anchor.hash:
        return Problem(anchor.seq, f"entry {anchor.seq} is not the head expected ({anchor}): its hash is now "
                                   f"{stored} (the chain was rewritten up to there)")
    return None


def delivered_head() -> Head | None:
    """The head the newest webhook delivery carried (its receiver holds a copy), or None."""
    body = Delivery.objects.order_by("-pk").values_list("body", flat=True).first()
    try:
        carried = json.loads(body)["auditHead"] if body else None
        return Head(int(carried["seq"]), str(carried["hash"])) if carried else None
    except (ValueError, KeyError, TypeError):
        return None  # a body from before deliveries carried the head


def against_checkpoint(checkpoint: AuditCheckpoint | None) -> Problem | None:
    # The links alone cannot show a chain recomputed from an edit onwards;
    # the head verified last time can.
    if checkpoint is None or checkpoint.seq == 0:
        return None
    stored = AuditEntry.objects.filter(seq=checkpoint.seq).values_list("hash", flat=True).first()
    when = f"{checkpoint.verified_at:%Y-%m-%d %H:%M:%S} UTC"
    if stored is None:
        return Problem(checkpoint.seq, f"entry {checkpoint.seq}, verified at {when}, is missing "
                                       "(the trail was cut short)")
    if stored != checkpoint.hash:
        return Problem(checkpoint.seq, f"entry {checkpoint.seq} changed since it was verified at {when} "
                                       "(the chain was rewritten up to there)")
    return None


def save(result: Verification, complete: bool, chain_ok: bool) -> None:
    # A broken chain never moves the checkpoint: back to a truncated head it
    # would make the next verification pass. The problem is kept beside it.
    defaults = {"complete": complete, "problem": "\n".join(p.message for p in result.problems)}
    if chain_ok or not AuditCheckpoint.objects.filter(pk=1).exists():
        defaults.update(seq=result.head_seq, hash=result.head_hash, verified_at=timezone.now())
        _log_head(result, "whole" if complete else "links")
    AuditCheckpoint.objects.update_or_create(pk=1, defaults=defaults)


def _log_head(result: Verification, how: str) -> None:
    # An append-only anchor outside the database, where logs are shipped: a
    # later ``audit verify --expect-head`` with any logged head finds a cut tail.
    logger.info("audit trail verified (%s) through head %s", how, Head(result.head_seq, result.head_hash))


def verify_recent(limit: int = 1000) -> tuple[AuditCheckpoint | None, Problem | None]:
    """Extend the last verification by at most ``limit`` new entries (links only), for the audit page.

    Returns the checkpoint (None when the trail was never verified and is
    empty) and what is wrong, if anything: the page stays cheap whatever the
    trail's length, and ``manage.py audit verify`` does the whole work.
    """
    checkpoint = AuditCheckpoint.objects.filter(pk=1).first()
    result = Verification()
    if (moved := against_checkpoint(checkpoint)) is not None:
        return checkpoint, moved
    after, head = (checkpoint.seq, checkpoint.hash) if checkpoint else (0, GENESIS)
    result.head_seq, result.head_hash = after, head
    broken = walk(result, after, head, limit=limit)
    if result.entries:
        with transaction.atomic():
            # Racing page views may both extend it; the later write names a head just as verified.
            AuditCheckpoint.objects.update_or_create(pk=1, defaults={
                "seq": result.head_seq, "hash": result.head_hash, "verified_at": timezone.now(), "complete": False,
            })
        _log_head(result, "links")
        checkpoint = AuditCheckpoint.objects.get(pk=1)
    return checkpoint, broken
