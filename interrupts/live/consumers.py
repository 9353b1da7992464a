"""WebSocket consumers that keep open pages current. Each refuses anonymous sockets.

They relay pokes, not records: a message says "something changed at sequence
N"; the page fetches what it has not seen from the database, so a dropped
message or a reconnect never loses or repeats an event.
"""

import asyncio

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import relay
from ..reads import selectors
from ..models import Thread

# How long a socket gathers changes before counting what waits for its user
# again: a burst of decisions costs each open page one count, not one each.
RECOUNT_SECONDS = 1.0

# Close codes in the 4000 range are the application's: 4401 is "log in first".
UNAUTHENTICATED = 4401
NOT_FOUND = 4404


class InboxConsumer(AsyncJsonWebsocketConsumer):
    """ws/inbox/: a poke whenever interrupts are raised, decided or expire, and the counts.

    ``pending`` is every pending interrupt (counted once per change, by
    ``relay``); ``mine`` is what waits for this socket's user (their
    policies, their own decisions), counted here at most once per
    ``RECOUNT_SECONDS``, in a message of its own.
    """

    recount: asyncio.Task | None = None

    async def connect(self):
        if not self.scope["user"].is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        await self.channel_layer.group_add(relay.INBOX_GROUP, self.channel_name)
        await self.accept()
        await self.send_json({"type": "pending", **await self._counts()})

    async def disconnect(self, code):
        if self.recount is not None:
            self.recount.cancel()
        await self.channel_layer.group_discard(relay.INBOX_GROUP, self.channel_name)

    async def inbox_changed(self, message):
        await self.send_json({"type": "changed", "reason": message["reason"], "thread": message["thread"],
                              "pending": message["pending"]})
        if self.recount is None or self.recount.done():
            self.recount = asyncio.ensure_future(self._send_mine())

    async def _send_mine(self):
        await asyncio.sleep(RECOUNT_SECONDS)
        await self.send_json({"type": "mine", **await self._counts()})

    @database_sync_to_async
    def _counts(self) -> dict:
        return {"pending": selectors.pending_count(), "mine": selectors.waiting_count(self.scope["user"])}


class ThreadConsumer(AsyncJsonWebsocketConsumer):
    """ws/threads/<thread_id>/: each event recorded on the thread, by sequence number."""

    async def connect(self):
        if not self.scope["user"].is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        self.thread_pk = await self._thread_pk(self.scope["url_route"]["kwargs"]["thread_id"])
        if self.thread_pk is None:
            await self.close(code=NOT_FOUND)
            return
        self.group = relay.thread_group(self.thread_pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Where the log stands now: a page that is behind fetches the difference.
        await self.send_json({"type": "hello", "last_seq": await self._last_seq()})

    async def disconnect(self, code):
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def thread_event(self, message):
        await self.send_json({"type": "event", "seq": message["seq"], "event_type": message["event_type"]})

    @database_sync_to_async
    def _thread_pk(self, thread_id: str):
        return Thread.objects.filter(thread_id=thread_id).values_list("pk", flat=True).first()

    @database_sync_to_async
    def _last_seq(self) -> int:
        return Thread.objects.values_list("last_seq", flat=True).get(pk=self.thread_pk)
