"""Every broadcast that keeps open pages current, sent after the transaction that caused it commits.

A broadcast is a hint, not the record: the channel layer drops messages for a
full channel, so every message carries the thread's sequence number and a
subscriber that sees a gap reads the missing events from the database.

Services never write ``transaction.on_commit`` for a broadcast themselves:
they call ``event_appended`` or ``inbox_changed`` inside their transaction,
and the message leaves only if it commits (a rolled-back change announces
nothing). The reasons an inbox changes, and the names of the CUSTOM events
Countersign itself writes into a thread's log, are defined here once.

Where a supervisor runs (a serving process), the committed message is handed
to its event loop (``wakeup.call_soon``) and sent from there: the database
thread that committed does not wait for the layer. Elsewhere it is sent
before the commit's caller goes on.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import threading
import weakref
from collections.abc import Callable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from ..hub import wakeup
from ..models import Interrupt

logger = logging.getLogger(__name__)

INBOX_GROUP = "inbox"


class Reason(enum.StrEnum):
    """Why the inbox changed: the ``reason`` of every ``changed`` message on ws/inbox/."""

    RAISED = "raised"  # a run ended with interrupts
    CLOSED = "closed"  # a run failed or was stopped: its pending interrupts closed
    DECIDED = "decided"  # a decision was taken (inbox, API or gateway)
    REVISED = "revised"  # a decision was replaced by its author
    EXPIRED = "expired"  # interrupts passed their expiresAt
    DELIVERY = "delivery"  # a run started, or stopped, waiting for its agent
    REFUSED = "refused"  # a resumed run failed: the agent refused the answers, which wait for people
    SETTLED = "settled"  # someone sent a refused answer again, reopened its batch or closed it
    CLAIMED = "claimed"  # a card was claimed, released or its claim lapsed
    ESCALATED = "escalated"  # a card missed its target and its backup group may decide it too


class Note(enum.StrEnum):
    """Names of the CUSTOM events Countersign writes into a thread's log (``from_agent`` false)."""

    DELIVERY_FAILED = "countersign.delivery_failed"
    RETRY_REQUESTED = "countersign.retry_requested"
    INTERRUPTS_EXPIRED = "countersign.interrupts_expired"
    REFUSED_ANSWER_SETTLED = "countersign.refused_answer_settled"
    SENT_AGAIN = "countersign.sent_again"


def thread_group(thread_pk: int) -> str:
    """The group of everyone watching one thread (names: [A-Za-z0-9._-], < 100 chars)."""
    return f"thread.{thread_pk}"


def user_group(user_pk) -> str:
    """The group of one user's thread sockets, told when the user's sessions or rights change."""
    return f"user.{user_pk}"


def _send(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    # Handed to the serving loop, not awaited: the database thread that
    # committed goes on with its next job while the layer fans out.
    if wakeup.call_soon(_schedule, layer, group, message):
        return
    try:  # no serving loop in this process (a management command, a test): send it here
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # a broadcast must never undo or fail a committed write
        logger.exception("broadcast to %s failed", group)


def _send_now(group: str, message: dict) -> None:
    """Send before returning: once the caller goes on (a logout answers), the layer holds the message."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:  # committed on an event loop's own thread, which a blocking send would stall
        _schedule(layer, group, message)
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # a broadcast must never undo or fail a committed write
        logger.exception("broadcast to %s failed", group)


# The last broadcast scheduled to each group, per loop: each waits for the one
# before it, so a group's watchers hear this process's broadcasts in the order
# their changes committed. Groups do not wait for each other: a busy thread's
# events must not hold up the inbox.
_latest: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Task]] = weakref.WeakKeyDictionary()
# Strong references: the event loop keeps only weak ones to tasks.
_sending: set[asyncio.Task] = set()


def _schedule(layer, group: str, message: dict) -> None:
    loop = asyncio.get_running_loop()
    latest = _latest.setdefault(loop, {})
    task = loop.create_task(_deliver(latest.get(group), layer, group, message))
    latest[group] = task
    _sending.add(task)
    task.add_done_callback(functools.partial(_sent, latest, group))


async def _deliver(before: asyncio.Task | None, layer, group: str, message: dict) -> None:
    if before is not None and not before.done():
        await asyncio.wait([before])  # its failure is its own, logged by _sent
    await layer.group_send(group, message)


def _sent(latest: dict[str, asyncio.Task], group: str, task: asyncio.Task) -> None:
    _sending.discard(task)
    if latest.get(group) is task:
        del latest[group]
    if not task.cancelled() and task.exception() is not None:
        logger.error("broadcast to %s failed", group, exc_info=task.exception())


def event_appended(thread_pk: int, seq: int, event_type: str) -> None:
    """After commit, tell the thread's watchers that events up to ``seq`` were recorded (they read the log)."""
    transaction.on_commit(lambda: _send(thread_group(thread_pk), {
        "type": "thread.event", "seq": seq, "event_type": event_type}))


def inbox_changed(thread_pk: int, seq: int, reason: Reason) -> None:
    """After commit, tell inbox watchers that pending interrupts changed, with the new count.

    Counted once per change here, not by each watcher: with a thousand open
    inboxes a count per socket took seconds of database time for one change.
    """
    def send() -> None:
        pending = Interrupt.objects.filter(status=Interrupt.Status.PENDING).count()
        _send(INBOX_GROUP, {"type": "inbox.changed", "thread": thread_pk, "seq": seq,
                            "reason": str(Reason(reason)), "pending": pending})

    transaction.on_commit(send)


# Held from reading a card's attention to handing the message on: two threads telling of one card
# (a claim, a page's presence) hand theirs on in the order they read, so the last message a page
# hears says what the later change left, never what the earlier one read before it.
_telling_attention = threading.Lock()


def attention(interrupt_pk: int, describe: Callable[[int], dict]) -> None:
    """After commit, tell inbox watchers who holds or has open one card: ``describe(pk)`` says it, then.

    Read after the commit, not before: of two changes committing close
    together, each message says what the later one left.
    """
    def tell() -> None:
        with _telling_attention:
            _send(INBOX_GROUP, {"type": "inbox.attention", "interrupt": interrupt_pk, **describe(interrupt_pk)})

    transaction.on_commit(tell)


def deliveries_changed() -> None:
    """After commit, tell staff watching the Deliveries page that a webhook delivery was tried or queued again."""
    transaction.on_commit(lambda: _send(INBOX_GROUP, {"type": "inbox.deliveries"}))


def standing_changed(user_pk) -> None:
    """After commit, tell every process that a user's sessions or rights changed: their sockets check again.

    Sent before the committing caller goes on, not handed to the serving loop: once a logout
    has answered, the layer holds this message ahead of any broadcast made after it.
    """
    def send() -> None:
        _send_now(INBOX_GROUP, {"type": "inbox.standing", "user": user_pk})
        _send_now(user_group(user_pk), {"type": "user.standing", "user": user_pk})

    transaction.on_commit(send)
