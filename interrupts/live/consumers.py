"""WebSocket consumers that keep open pages current. Each refuses anonymous sockets.

They relay pokes, not records: a message says "something changed at sequence
N"; the page fetches what it has not seen from the database, so a dropped
message or a reconnect never loses or repeats an event.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import uuid
import weakref

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import DEFAULT_CHANNEL_LAYER, InMemoryChannelLayer, channel_layers, get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.utils import timezone

from ..hub import claims, dbthreads
from ..models import Thread
from ..reads import selectors
from ..rules import eligibility
from . import relay, standing

logger = logging.getLogger(__name__)

# The sockets' database work, off channels' database_sync_to_async: that is the process's one shared
# thread, where a presence write waiting for SQLite's lock held up every socket's connect and count.
sockets_db = dbthreads.Pool("sockets-db", {"postgresql": 4, "sqlite": 3})

# How long this process gathers changes before counting what waits for each
# user again: a burst of decisions costs one count per user, not one each.
RECOUNT_SECONDS = 1.0

# Close codes in the 4000 range are the application's: 4401 is "log in first".
UNAUTHENTICATED = 4401
NOT_FOUND = 4404
# "Try again later": the channel layer (Redis) could not be reached, as just after its restart.
# WebSocket's own 1013 says so, but daphne (autobahn) sends only 1000 or 3000-4999: 4013 mirrors it,
# as 4401 mirrors HTTP's 401. Pages reconnect on any code but 4401.
TRY_AGAIN_LATER = 4013
try:
    from redis.exceptions import RedisError
except ImportError:  # no Redis, the in-memory layer
    RedisError = OSError  # noqa: N816
LAYER_DOWN = (OSError, RedisError)


async def _try_again_later(consumer) -> None:
    """Accept, then close with TRY_AGAIN_LATER: a close before accept reaches the browser as a bare HTTP 403."""
    await consumer.accept()
    await consumer.close(code=TRY_AGAIN_LATER)


class _Standing:
    """A socket that closes with "log in first" once its user may no longer read (``standing``).

    It checks again when told that its user's sessions or rights changed
    (``recheck``), and when its session expires. Once ended it hears nothing
    more, even what reaches it before its close does.
    """

    session_key: str | None = None
    ended = False
    _expiry: asyncio.TimerHandle | None = None
    _checking: asyncio.Task | None = None

    async def in_standing(self) -> bool:
        """Whether this socket's user may still read; if so, check again when the session expires."""
        found = await sockets_db(standing.check)(self.scope["user"].pk, self.session_key)
        if found is None:
            return False
        self.scope["user"], until = found
        if self._expiry is not None:
            self._expiry.cancel()
        # A fresh context: the check outlives whatever message scheduled it.
        self._expiry = asyncio.get_running_loop().call_later(
            standing.expires_in(until), self._expired, context=contextvars.Context())
        return True

    def _expired(self) -> None:
        self._checking = asyncio.get_running_loop().create_task(self.recheck())

    async def recheck(self) -> None:
        if self.ended:
            return
        try:
            still = await self.in_standing()
        except Exception:  # the database could not say: closed all the same, the page reconnects and is checked then
            logger.exception("checking a socket's session failed")
            await self.end(code=None)
            return
        if not still:
            await self.end()

    async def log_in_first(self) -> None:
        """Accept, then close with UNAUTHENTICATED: a close before accept reaches the page as a bare
        refused handshake (HTTP 403), which it retries for ever instead of saying "log in"."""
        await self.accept()
        await self.close(code=UNAUTHENTICATED)

    async def end(self, code: int | None = UNAUTHENTICATED) -> None:
        """Close for good (the socket was accepted): logged out, expired, deactivated or deleted."""
        self.ended = True
        self.stop_watching()
        await self.close(code=code)

    def stop_watching(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None


class _PokeConsumer(AsyncJsonWebsocketConsumer):
    """A consumer whose broadcast handlers (``pokes``, by message type) touch no database."""

    # Channels runs close_old_connections in its one shared database thread before every message;
    # for a poke that only forwards what it carries, every watcher queued behind every stream's work.

    pokes: frozenset[str] = frozenset()

    async def dispatch(self, message):
        if message["type"] in self.pokes:
            await getattr(self, get_handler_name(message))(message)
        else:
            await super().dispatch(message)


class InboxConsumer(_Standing, AsyncJsonWebsocketConsumer):
    """ws/inbox/: a poke whenever interrupts are raised, decided or expire, and the counts.

    ``pending`` is every pending interrupt (counted once per change, by
    ``relay``); ``mine`` is what waits for this socket's user (their
    policies, their own decisions). The socket hears both through this
    process's ``Inboxes``, not a channel-layer group of its own.
    """

    # What this socket heard while it connected: sent after its first count,
    # so a page always hears "pending" first and every change after it.
    held: list[str] | None = None
    # No layer channel of its own (an alias that names no layer): it hears through Inboxes. Each
    # socket's own receive was cancelled when its page went, and on Redis a cancelled receive
    # can drop a message meant for another channel of the process (channels_redis issue 366).
    channel_layer_alias = "countersign-inbox-sockets-hear-through-inboxes"

    async def connect(self):
        if not self.scope["user"].is_authenticated:
            await self.log_in_first()
            return
        self.held = []
        self.socket_id = uuid.uuid4().hex
        # The session this socket was opened with: the count rounds close the
        # socket once it ended (logged out, expired) or its user may not log in.
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        here = Inboxes.here()
        try:
            await here.join(self)
        except LAYER_DOWN:
            logger.warning("inbox socket closed (try again later): the channel layer is unreachable", exc_info=True)
            await here.leave(self)
            await _try_again_later(self)
            return
        try:
            await self.accept()
            # Checked once this socket hears every change to its user's standing (none is missed),
            # and accepted first so that the page reads "log in first" (see log_in_first).
            if not await self.in_standing():
                await self.end()
                return
            await self.send_json({"type": "pending", **await self._counts()})
            while self.held:
                await self.send(text_data=self.held.pop(0))
        except BaseException:
            # disconnect() is not called for a connect that failed: without this the
            # socket would stay among this process's sockets, holding every broadcast.
            await here.leave(self)
            raise
        self.held = None

    async def disconnect(self, code):
        self.stop_watching()
        await Inboxes.here().leave(self)
        if self._later is not None:
            self._later.cancel()
        async with self._viewing():
            self._gone = True  # a message held past the burst and heard now would outlive the socket
            if self.said_viewing:
                await sockets_db(claims.left)(self.socket_id)

    # What a page may say over its socket: which cards it has open ("viewing").
    said_viewing = False
    VIEWING_BYTES = 4096
    # Messages a socket may send per window. Past it, only the latest is kept, and heard when the
    # next window opens: what a page said last holds (a fast j/k through the cards), at bounded work.
    VIEWING_BURST, VIEWING_WINDOW = 10, 10.0
    _latest: str | None = None
    _taken = 0  # messages taken in their turn: a held one is heard only if none came after it
    _later: asyncio.TimerHandle | None = None
    _gone = False

    def _viewing(self) -> asyncio.Lock:
        """Held while a message is heard: the one held past the burst is heard beside the socket's own turn."""
        return self.__dict__.setdefault("_viewing_lock", asyncio.Lock())

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        # Bounded before it is parsed: a page's message is a few numbers.
        if text_data is None or len(text_data) > self.VIEWING_BYTES:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        window, count = getattr(self, "_said", (now, 0))
        if now - window > self.VIEWING_WINDOW:
            window, count = now, 0
        if count >= self.VIEWING_BURST:
            self._latest = text_data
            if self._later is None:
                self._later = loop.call_later(window + self.VIEWING_WINDOW - now, self._say_latest)
            return
        self._said = (window, count + 1)
        if self._later is not None:  # this one is newer than the one held
            self._later.cancel()
            self._later, self._latest = None, None
        self._taken += 1
        await self._hear(text_data)

    def _say_latest(self) -> None:
        self._later = None
        text, self._latest = self._latest, None
        if text is not None:
            self._said = (asyncio.get_running_loop().time(), 1)
            self._held_task = asyncio.ensure_future(self._hear(text, held=self._taken))

    async def _hear(self, text_data: str, held: int | None = None) -> None:
        async with self._viewing():
            # Closed, or (held) a newer message came in since the window opened: it says what holds.
            if self._gone or (held is not None and held != self._taken):
                return
            try:
                await super().receive(text_data=text_data)
            except Exception:
                if held is None:
                    raise
                logger.exception("hearing an inbox socket's held message failed")  # nobody awaits it

    @classmethod
    async def decode_json(cls, text_data):
        try:
            return json.loads(text_data)
        except ValueError:  # a page's message that is not JSON says nothing
            return None

    async def receive_json(self, content, **kwargs):
        if not isinstance(content, dict) or content.get("type") != "viewing":
            return
        pks = content.get("interrupts")
        if not isinstance(pks, list) or not all(type(pk) is int and 0 < pk < 2**63 for pk in pks):
            return
        # A socket outlives its session until a count round notices: one whose user logged
        # out or was deactivated must not go on showing them looking at cards.
        if not await self.in_standing():
            await self.end()
            return
        self.said_viewing = True
        await sockets_db(claims.viewing)(self.scope["user"], self.socket_id, pks)

    async def end(self, code: int | None = UNAUTHENTICATED) -> None:
        await super().end(code)  # ended: nothing told to this process's sockets reaches it any more
        await Inboxes.here().leave(self)

    async def tell(self, text: str) -> None:
        """Send one encoded message, or hold it until the connect has sent its counts."""
        if self.ended:
            return
        if self.held is not None:
            self.held.append(text)
        else:
            await self.send(text_data=text)

    @sockets_db
    def _counts(self) -> dict:
        return {"pending": selectors.pending_count(), **_mine(selectors.waiting(self.scope["user"]))}


class Inboxes:
    """The inbox sockets open in this process (this event loop), by user, and what they hear.

    The process, not each socket, joins the layer's inbox group: one layer message per process
    per broadcast. "mine" is recounted in rounds (docs/internals/live.md).
    """

    # Writes to sockets between two chances for the loop's other work.
    FAN_OUT_SLICE = 100
    # Memberships of a layer group lapse (channels: after a day); renewed well before.
    RENEW_SECONDS = 3600.0

    _per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Inboxes] = weakref.WeakKeyDictionary()

    @classmethod
    def here(cls) -> Inboxes:
        """This event loop's (each test runs its own loop; a server has one)."""
        loop = asyncio.get_running_loop()
        found = cls._per_loop.get(loop)
        if found is None:
            found = cls._per_loop[loop] = cls()
        return found

    def __init__(self) -> None:
        self.sockets: dict[int, set[InboxConsumer]] = {}
        # Joining and leaving the layer's group, one at a time.
        self.subscribing = asyncio.Lock()
        self.layer = None  # the layer instance its subscription listens on (``_own_layer``)
        self.channel: str | None = None
        self.listening: list[asyncio.Task] = []
        self.round: asyncio.Task | None = None
        self.counting = False
        self.again = False

    async def join(self, consumer: InboxConsumer) -> None:
        """Count ``consumer`` among this process's inbox sockets; once this returns it hears every change."""
        self.sockets.setdefault(consumer.scope["user"].pk, set()).add(consumer)
        async with self.subscribing:
            if self.channel is None:
                layer = self.layer = self.layer or self._own_layer()
                channel = await layer.new_channel()
                await layer.group_add(relay.INBOX_GROUP, channel)
                self.channel = channel
                # A fresh context: these outlive the socket whose connect started them.
                self.listening = [asyncio.get_running_loop().create_task(job, context=contextvars.Context())
                                  for job in (self._listen(layer, channel), self._renew(layer, channel))]

    async def leave(self, consumer: InboxConsumer) -> None:
        user_pk = getattr(consumer.scope.get("user"), "pk", None)
        found = self.sockets.get(user_pk)
        if found is None or consumer not in found:
            return
        found.discard(consumer)
        if not found:
            del self.sockets[user_pk]
        async with self.subscribing:
            if self.sockets or self.channel is None:
                return
            channel, self.channel = self.channel, None  # nobody left to tell
            # The listener or the count round may be what closes the last socket: it stops
            # last, once the group is left, or the cancel would cut the leaving short.
            current = asyncio.current_task()
            for task in (*self.listening, self.round):
                if task is not None and task is not current:
                    task.cancel()
            await self.layer.group_discard(relay.INBOX_GROUP, channel)
            if current in self.listening or current is self.round:
                current.cancel()

    @staticmethod
    def _own_layer():
        """A layer instance for this subscription alone. On Redis, an instance's receives share one
        blocking read, and a consumer's receive cancelled mid-read (its socket closed) loses what
        that read had just taken, for whichever channel (channels_redis issue 366). Alone on its
        instance, the subscription's read is cancelled only when nobody is left to tell."""
        shared = get_channel_layer()
        if isinstance(shared, InMemoryChannelLayer):
            return shared  # this process's memory: another instance would hear nothing
        return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)

    async def _listen(self, layer, channel: str) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # the layer's connection failed: pages read the database when they reconnect
                logger.exception("receiving inbox broadcasts failed")
                await asyncio.sleep(1)
                continue
            if message.get("type") == "inbox.deliveries":
                # Only staff see deliveries: nobody else's page has anything to fetch.
                await self._tell(json.dumps({"type": "deliveries"}), [
                    c for found in self.sockets.values() for c in found if c.scope["user"].is_staff])
            elif message.get("type") == "inbox.attention":
                await self._tell(json.dumps({
                    "type": "attention", "interrupt": message["interrupt"], "claim": message["claim"],
                    "viewers": message["viewers"]}), [c for found in self.sockets.values() for c in found])
            elif message.get("type") == "inbox.standing":
                # Before any message after it: a socket that must close hears nothing that follows.
                for consumer in list(self.sockets.get(message["user"], ())):
                    try:
                        await consumer.recheck()
                    except Exception:  # one broken socket must not keep the others open
                        logger.exception("closing an inbox socket failed")
            elif message.get("type") == "inbox.changed":
                await self._tell(json.dumps({
                    "type": "changed", "reason": message["reason"], "thread": message["thread"],
                    "pending": message["pending"]}), [c for found in self.sockets.values() for c in found])
                self.changed()

    async def _renew(self, layer, channel: str) -> None:
        while True:
            await asyncio.sleep(self.RENEW_SECONDS)
            try:
                await layer.group_add(relay.INBOX_GROUP, channel)
            except Exception:
                logger.exception("renewing the inbox subscription failed")

    async def _tell(self, text: str, consumers: list[InboxConsumer]) -> None:
        written = 0
        for consumer in consumers:
            try:
                await consumer.tell(text)
            except Exception:  # one broken socket must not keep the others from hearing
                logger.exception("writing to an inbox socket failed")
            written += 1
            if written % self.FAN_OUT_SLICE == 0:
                await asyncio.sleep(0)

    def changed(self) -> None:
        if self.round is None or self.round.done():
            self.round = asyncio.get_running_loop().create_task(self._rounds(), context=contextvars.Context())
        elif self.counting:
            self.again = True
        # else: a round is due and will count this change too

    async def _rounds(self) -> None:
        while True:
            await asyncio.sleep(RECOUNT_SECONDS)
            self.counting, self.again = True, False
            # The sockets this round judges: one that connects while it counts was judged by its own connect,
            # and its session, not among those read, must not read as ended (its page said "logged out").
            judged = {c for found in self.sockets.values() for c in found}
            try:
                users = {pk: next(iter(found)).scope["user"] for pk, found in self.sockets.items()}
                sessions = {c.session_key for c in judged}
                counted, live, active = await sockets_db(_count_for)(users, sessions)
            except Exception:  # the next change tries again; the page keeps its last count meanwhile
                logger.exception("counting the inbox badges failed")
                return
            finally:
                self.counting = False
            ended = [c for pk, found in self.sockets.items() for c in found
                     if c in judged and (c.session_key not in live or pk not in active)]
            for user_pk, text in counted.items():
                # A deactivated user's own sockets hear their count fall to 0 before they close.
                await self._tell(text, [c for c in self.sockets.get(user_pk, ())
                                        if c.session_key in live or c not in judged])
            for consumer in ended:
                await consumer.end()  # logged out, expired or deactivated: nothing more
            if not self.again:
                return


NOTHING = selectors.Counted(0)


def _mine(waiting: selectors.Counted) -> dict:
    """What waits for the reader, as the socket says it: how many, and ``more`` past ``INBOX_COUNTED``."""
    return {"mine": waiting.n, "more": waiting.more}


def _count_for(users: dict, sessions: set) -> tuple[dict[int, str], set, set]:
    """The "mine" message for each of ``users`` (by pk), encoded, which ``sessions`` are live, which users active.

    Each user is read again: a socket's user keeps the groups it connected with, and a reviewer
    removed from Reviewers, or deactivated, must stop seeing work counted as theirs.
    """
    pending = selectors.pending_count()
    in_force = eligibility.in_force() if users else []
    fresh = get_user_model().objects.filter(pk__in=list(users), is_active=True).in_bulk()
    counted = {pk: json.dumps({"type": "mine", "pending": pending,
                               **_mine(selectors.waiting(fresh[pk], in_force) if pk in fresh else NOTHING)})
               for pk in users}
    live = set(Session.objects.filter(session_key__in=[k for k in sessions if k], expire_date__gt=timezone.now())
               .values_list("session_key", flat=True))
    return counted, live, set(fresh)


class ThreadConsumer(_Standing, _PokeConsumer):
    """ws/threads/<thread_id>/: each event recorded on the thread, by sequence number.

    Every logged-in user reads every thread, so a thread socket stays open
    exactly as long as its user may read at all (``standing``).
    """

    pokes = frozenset({"thread.event"})

    async def connect(self):
        if not self.scope["user"].is_authenticated:
            await self.log_in_first()
            return
        self.thread_pk = await self._thread_pk(self.scope["url_route"]["kwargs"]["thread_id"])
        if self.thread_pk is None:
            await self.close(code=NOT_FOUND)
            return
        group, user_group = relay.thread_group(self.thread_pk), relay.user_group(self.scope["user"].pk)
        try:
            await self.channel_layer.group_add(group, self.channel_name)
            self.group = group
            # Every change to this user's standing, heard from here on (``_watch_standing`` checks it).
            await self.channel_layer.group_add(user_group, self.channel_name)
            self.user_group = user_group
        except LAYER_DOWN:
            logger.warning("thread socket closed (try again later): the channel layer is unreachable", exc_info=True)
            await _try_again_later(self)
            return
        await self.accept()
        if not await self._watch_standing():
            return
        # Where the log stands now: a page that is behind fetches the difference.
        await self.send_json({"type": "hello", "last_seq": await self._last_seq()})

    async def disconnect(self, code):
        self.stop_watching()
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if getattr(self, "user_group", None):
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def _watch_standing(self) -> bool:
        """Check this user's standing, now that its changes are heard; False (closed) if they may not read."""
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        if await self.in_standing():
            return True
        await self.end()
        return False

    async def user_standing(self, message):
        await self.recheck()

    async def thread_event(self, message):
        if self.ended:  # closed, the page gone: what was already on its way is not for it
            return
        await self.send_json({"type": "event", "seq": message["seq"], "event_type": message["event_type"]})

    @sockets_db
    def _thread_pk(self, thread_id: str):
        return Thread.objects.filter(thread_id=thread_id).values_list("pk", flat=True).first()

    @sockets_db
    def _last_seq(self) -> int:
        return Thread.objects.values_list("last_seq", flat=True).get(pk=self.thread_pk)
