"""Channels group names and the broadcasts that keep open pages current.

A broadcast is a hint, not the record: the channel layer drops messages for a
full channel, so every message carries the thread's sequence number and a
subscriber that sees a gap reads the missing events from the database.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

INBOX_GROUP = "inbox"


def thread_group(thread_pk: int) -> str:
    """The group of everyone watching one thread (names: [A-Za-z0-9._-], < 100 chars)."""
    return f"thread.{thread_pk}"


def _send(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # a broadcast must never undo or fail a committed write
        logger.exception("broadcast to %s failed", group)


def event_appended(thread_pk: int, seq: int, event_type: str) -> None:
    """Tell the thread's watchers that event ``seq`` was recorded (they read it from the log)."""
    _send(thread_group(thread_pk), {"type": "thread.event", "seq": seq, "event_type": event_type})


def inbox_changed(thread_pk: int, seq: int, reason: str) -> None:
    """Tell inbox watchers that pending interrupts changed (raised, decided, expired), with the new count.

    Counted once here, not by each watcher: with a thousand open inboxes a
    count per socket took seconds of database time for one change.
    """
    from .selectors import pending_count

    _send(INBOX_GROUP, {"type": "inbox.changed", "thread": thread_pk, "seq": seq, "reason": reason,
                        "pending": pending_count()})
