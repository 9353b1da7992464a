"""The process's inbox subscription hears every broadcast while other sockets of the process close.

On Redis, the receives of one layer instance share one blocking read of the process's list. A
receive cancelled just after that read took a message (channels cancels a consumer's receive when
its socket closes) loses the message, whichever channel it was for (channels_redis issue 366).
``Inboxes`` listens on an instance of its own, so no socket's closing can cost it a broadcast.
"""

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest
from channels.layers import channel_layers
from channels_redis.core import RedisChannelLayer
from redis import Redis

from interrupts.live import consumers, relay

from ..waiting import until

PREFIX = "inbox-layer-test"


@pytest.fixture
def redis_layer(settings, private_redis):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [private_redis.url], "prefix": PREFIX}}}
    return channel_layers["default"]


class Socket:
    """What ``Inboxes`` asks of an inbox socket: its user, and to be told."""

    def __init__(self) -> None:
        self.scope = {"user": SimpleNamespace(pk=1, is_staff=False)}
        self.heard: list[str] = []

    async def tell(self, text: str) -> None:
        self.heard.append(text)


def blocked_reads(redis) -> int:
    """Blocking reads Redis holds open now. A layer takes its receive lock a round trip before
    its read is out (channels_redis cleans the in-flight queue first), and reads again every 5 s."""
    with Redis.from_url(redis.url) as client:
        return client.info("clients")["blocked_clients"]


def broadcast_from_another_process(redis) -> None:
    """A broadcast sent, and taken off Redis by the process's pending read, while this loop is busy."""
    def send():
        other = RedisChannelLayer(hosts=[redis.url], prefix=PREFIX)
        asyncio.run(other.group_send(relay.INBOX_GROUP, {
            "type": "inbox.attention", "interrupt": 1, "claim": None, "viewers": []}))

    sender = threading.Thread(target=send)
    sender.start()
    sender.join()  # the loop is held meanwhile, as a busy one would be
    client = Redis.from_url(redis.url)
    queued = [key for key in client.keys(f"{PREFIX}specific.*") if not key.endswith(b"$inflight")]
    deadline = time.monotonic() + 5
    while any(client.zcard(key) for key in queued):  # until a read took it (the loop, held, has not seen it)
        assert time.monotonic() < deadline, "no read took the broadcast"
    client.close()


async def test_a_socket_closing_mid_read_costs_the_inbox_subscription_no_broadcast(private_redis, redis_layer):
    # Another socket of the process, its consumer's receive out on the shared instance's read...
    waiting = asyncio.ensure_future(redis_layer.receive(await redis_layer.new_channel()))
    await until(lambda: redis_layer.receive_lock is not None and redis_layer.receive_lock.locked())
    inboxes, socket = consumers.Inboxes(), Socket()
    await inboxes.join(socket)
    try:
        # The subscription's own read is out too (on the shared instance, it waits its turn).
        await until(lambda: inboxes.layer.receive_lock is not None and inboxes.layer.receive_lock.locked())
        await until(lambda: blocked_reads(private_redis) == 2)  # both reads out at Redis, not just their locks
        broadcast_from_another_process(private_redis)
        # ...closes just then: its receive is cancelled with what its read took still unread.
        waiting.cancel()
        await until(lambda: socket.heard, timeout=15)
    finally:
        await inboxes.leave(socket)
