"""WebSocket consumers that keep open pages current. Each refuses anonymous sockets.

They relay pokes, not records: a message says "something changed at sequence
N"; the page fetches what it has not seen from the database, so a dropped
message or a reconnect never loses or repeats an event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import relay
from ..hub import policies
from ..reads import selectors
from ..models import Thread

logger = logging.getLogger(__name__)

# How long this process gathers changes before counting what waits for each
# user again: a burst of decisions costs one count per user, not one each.
RECOUNT_SECONDS = 1.0

# Close codes in the 4000 range are the application's: 4401 is "log in first".
UNAUTHENTICATED = 4401
NOT_FOUND = 4404


class _PokeConsumer(AsyncJsonWebsocketConsumer):
    """A consumer whose broadcast handlers (``pokes``, by message type) touch no database.

    Channels runs ``close_old_connections`` in the one shared database thread
    before every message it hands a consumer; for a poke that only forwards
    what it carries, a thousand sockets then queued behind each other, and
    behind every stream's database work, to hear one broadcast.
    """

    pokes: frozenset[str] = frozenset()

    async def dispatch(self, message):
        if message["type"] in self.pokes:
            await getattr(self, get_handler_name(message))(message)
        else:
            await super().dispatch(message)


class InboxConsumer(_PokeConsumer):
    """ws/inbox/: a poke whenever interrupts are raised, decided or expire, and the counts.

    ``pending`` is every pending interrupt (counted once per change, by
    ``relay``); ``mine`` is what waits for this socket's user (their
    policies, their own decisions), counted by this process's ``Badges`` at
    most once per ``RECOUNT_SECONDS`` for each user with an inbox open here,
    and sent to each of their sockets in a message of its own.
    """

    pokes = frozenset({"inbox.changed"})

    async def connect(self):
        if not self.scope["user"].is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        await self.channel_layer.group_add(relay.INBOX_GROUP, self.channel_name)
        await self.accept()
        Badges.here().add(self)
        await self.send_json({"type": "pending", **await self._counts()})

    async def disconnect(self, code):
        Badges.here().discard(self)
        await self.channel_layer.group_discard(relay.INBOX_GROUP, self.channel_name)

    async def inbox_changed(self, message):
        await self.send_json({"type": "changed", "reason": message["reason"], "thread": message["thread"],
                              "pending": message["pending"]})
        Badges.here().changed()

    @database_sync_to_async
    def _counts(self) -> dict:
        return {"pending": selectors.pending_count(), "mine": selectors.waiting_count(self.scope["user"])}


class Badges:
    """The inbox sockets open in this process, by user, and the "mine" count each of their users is sent.

    A change (heard on any socket, whichever process made it) starts a round
    ``RECOUNT_SECONDS`` later, unless one is due: one database visit that
    reads the policies and the pending count once and each user's count once,
    however many sockets they have open. A change heard while a round counts
    starts another after it, so the last count always follows the last change.
    """

    _per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Badges] = weakref.WeakKeyDictionary()

    @classmethod
    def here(cls) -> Badges:
        """This event loop's (each test runs its own loop; a server has one)."""
        loop = asyncio.get_running_loop()
        found = cls._per_loop.get(loop)
        if found is None:
            found = cls._per_loop[loop] = cls()
        return found

    def __init__(self) -> None:
        self.sockets: dict[int, set[InboxConsumer]] = {}
        self.round: asyncio.Task | None = None
        self.counting = False
        self.again = False

    def add(self, consumer: InboxConsumer) -> None:
        self.sockets.setdefault(consumer.scope["user"].pk, set()).add(consumer)

    def discard(self, consumer: InboxConsumer) -> None:
        user_pk = getattr(consumer.scope.get("user"), "pk", None)
        found = self.sockets.get(user_pk)
        if found is not None:
            found.discard(consumer)
            if not found:
                del self.sockets[user_pk]
        if not self.sockets and self.round is not None:
            self.round.cancel()  # nobody left to tell

    def changed(self) -> None:
        if self.round is None or self.round.done():
            self.round = asyncio.get_running_loop().create_task(self._rounds())
        elif self.counting:
            self.again = True
        # else: a round is due and will count this change too

    async def _rounds(self) -> None:
        while True:
            await asyncio.sleep(RECOUNT_SECONDS)
            self.counting, self.again = True, False
            try:
                users = {pk: next(iter(found)).scope["user"] for pk, found in self.sockets.items()}
                counted = await database_sync_to_async(_count_for)(users)
            except Exception:  # the next change tries again; the page keeps its last count meanwhile
                logger.exception("counting the inbox badges failed")
                return
            finally:
                self.counting = False
            for user_pk, text in counted.items():
                for consumer in list(self.sockets.get(user_pk, ())):
                    await consumer.send(text_data=text)
            if not self.again:
                return


def _count_for(users: dict) -> dict[int, str]:
    """The "mine" message for each of ``users`` (by pk), encoded: the policies and the pending count read once."""
    pending = selectors.pending_count()
    in_force = policies.in_force() if users else []
    return {pk: json.dumps({"type": "mine", "pending": pending, "mine": selectors.waiting_count(user, in_force)})
            for pk, user in users.items()}


class ThreadConsumer(_PokeConsumer):
    """ws/threads/<thread_id>/: each event recorded on the thread, by sequence number."""

    pokes = frozenset({"thread.event"})

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
