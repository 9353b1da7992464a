"""The supervisor's notification rounds: due webhooks, then due emails, on a thread of their own."""

from __future__ import annotations

import asyncio
import logging

from ...conf import settings
from .. import dbthreads
from . import email, webhooks

logger = logging.getLogger(__name__)

# Not on asgiref's one shared thread: requests and streams never queue behind
# a notification round, nor it behind them.
_threads = dbthreads.Pool("notify")


async def deliver_webhooks(worker: str) -> int:
    """Send every due delivery this process can take; how many were tried."""
    outgoing = await _threads(webhooks.claim_deliveries)(worker)
    if not outgoing:
        return 0
    answers = await webhooks.post_all(outgoing)
    for item, answer in zip(outgoing, answers, strict=False):
        await _threads(webhooks.record)(item, worker, answer)
    return len(outgoing)


async def deliver_due(worker: str) -> None:
    """One round: due webhooks, then due emails; never inside a transaction, never raising."""
    try:
        await deliver_webhooks(worker)
    except Exception:
        logger.exception("delivering webhooks failed")
    try:
        await _threads(email.send_due_emails)(worker)
    except Exception:
        logger.exception("sending emails failed")


async def run_forever(worker: str) -> None:
    """The supervisor's notification loop: a round, then a poll interval's rest, until cancelled."""
    while True:
        await deliver_due(worker)
        await asyncio.sleep(settings.COUNTERSIGN_POLL_INTERVAL)
