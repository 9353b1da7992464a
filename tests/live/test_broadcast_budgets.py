"""What one inbox broadcast costs per open socket, counted where it does not vary with the machine.

A change is counted once (``relay.inbox_changed``), crosses the channel layer
once per process, is encoded once, and is written to each socket; what waits
for each reader is recounted once per user a moment later, however many of
their tabs are open. A change that adds work per socket (an encode, a
query) fails here, long before a thousand sockets would show it.
"""

import json

import pytest
from channels.db import database_sync_to_async
from django.contrib.sessions.models import Session

from interrupts.live import consumers, relay

from .. import factories as make
from ..round_trips import round_trips
from .test_consumers import ORIGIN, connect, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("closed_after")]

USERS, TABS = 3, 3  # each user with this many inbox tabs open
# Statements per reader recounted: their right to decide (their own permissions and their groups'),
# their groups (which policies admit them), and the count of what waits for them.
PER_USER = 4


async def test_a_broadcast_is_encoded_once_and_each_reader_recounted_once(monkeypatch):
    monkeypatch.setattr(consumers, "RECOUNT_SECONDS", 0.05)
    await database_sync_to_async(make.interrupt)()
    sockets = []
    for _ in range(USERS):
        cookie = await session_cookie()
        for _ in range(TABS):
            communicator, connected, _ = await connect("/ws/inbox/", ORIGIN, cookie)
            assert connected
            assert (await communicator.receive_json_from())["type"] == "pending"
            sockets.append(communicator)
    encoded = []
    dumps = json.dumps

    def counted(*args, **kwargs):
        text = dumps(*args, **kwargs)
        encoded.append(text)
        return text

    monkeypatch.setattr(json, "dumps", counted)
    await database_sync_to_async(relay.inbox_changed)(7, 3, "raised")
    for communicator in sockets:
        assert (await communicator.receive_json_from())["type"] == "changed"
        assert await communicator.receive_json_from() == {"type": "mine", "pending": 1, "mine": 1, "more": False}
    monkeypatch.setattr(json, "dumps", dumps)
    for communicator in sockets:
        assert await communicator.receive_nothing(timeout=0.2)  # once each: no second count
        await communicator.disconnect()
    # One encoding of the change, one of each user's count: none per socket.
    kinds = [json.loads(text)["type"] for text in encoded if text.startswith('{"type"')]
    assert sorted(kinds) == ["changed"] + ["mine"] * USERS, encoded


def test_the_recount_reads_the_database_once_per_user_whatever_their_tabs():
    make.interrupt()

    def users_and_sessions(count: int, tabs: int):
        users = {user.pk: user for user in (make.user() for _ in range(count))}
        keys = set()
        for pk in users:
            for n in range(tabs):
                key = f"{pk}-tab-{n}".ljust(32, "x")
                Session.objects.create(session_key=key, session_data="", expire_date="2999-01-01T00:00Z")
                keys.add(key)
        return users, keys

    cost = {}
    for count, tabs in ((1, 1), (1, TABS), (USERS, 1), (USERS, TABS)):
        users, keys = users_and_sessions(count, tabs)
        consumers._count_for(users, keys)  # the process's policies read once, as a server has
        with round_trips() as trips:
            counted, live, active = consumers._count_for(users, keys)
        assert live == keys and active == set(users) and set(counted) == set(users)
        cost[count, tabs] = trips.count
    assert cost[1, TABS] == cost[1, 1] and cost[USERS, TABS] == cost[USERS, 1], cost  # nothing per tab
    assert cost[USERS, 1] - cost[1, 1] == (USERS - 1) * PER_USER, cost
