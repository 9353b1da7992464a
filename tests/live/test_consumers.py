"""The WebSocket consumers through the full ASGI stack: routing, session login, origin check."""

import asyncio
import json
import threading

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.db import transaction

from interrupts.hub import supervisor, wakeup
from interrupts.live import relay
from interrupts.reads import selectors
from project.asgi import application

from .. import factories as make
from ..waiting import until
from .sockets import Communicator

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1:8000")


@database_sync_to_async
def session_cookie(reviewer: bool = True) -> tuple[bytes, bytes]:
    user = make.user(reviewer=reviewer)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session.session_key}".encode())


async def connect(path: str, *headers):
    communicator = Communicator(application, path, headers=list(headers))
    connected, code = await communicator.connect()
    return communicator, connected, code


async def test_an_anonymous_socket_is_closed_with_log_in_first():
    # Accepted, then closed: a refused handshake reaches the page as a bare failure it retries for ever.
    for path in ("/ws/inbox/", "/ws/threads/any/"):
        communicator, connected, _ = await connect(path, ORIGIN)
        assert connected
        assert await communicator.receive_output() == {"type": "websocket.close", "code": 4401}


async def test_a_foreign_origin_is_refused_even_with_a_session():
    cookie = await session_cookie()
    communicator, connected, _ = await connect("/ws/inbox/", (b"origin", b"https://evil.example"), cookie)
    assert not connected


async def test_the_inbox_socket_sends_the_pending_count_and_every_change():
    cookie = await session_cookie()
    await database_sync_to_async(make.interrupt)()
    communicator, connected, _ = await connect("/ws/inbox/", ORIGIN, cookie)
    assert connected
    assert await communicator.receive_json_from() == {"type": "pending", "pending": 1, "mine": 1, "more": False}
    # The broadcaster counts once for every watcher.
    await database_sync_to_async(make.interrupt)()
    await database_sync_to_async(relay.inbox_changed)(7, 3, "raised")
    assert await communicator.receive_json_from() == {"type": "changed", "reason": "raised", "thread": 7, "pending": 2}
    # What waits for this reader follows once the burst has settled: one count per socket, not per change.
    await database_sync_to_async(relay.inbox_changed)(7, 4, "raised")
    assert (await communicator.receive_json_from())["type"] == "changed"
    assert await communicator.receive_json_from() == {"type": "mine", "pending": 2, "mine": 2, "more": False}
    # One count for that burst: what the socket hears next is the next change, not a second count.
    await database_sync_to_async(relay.inbox_changed)(7, 5, "raised")
    assert await communicator.receive_json_from() == {
        "type": "changed", "reason": "raised", "thread": 7, "pending": 2}
    await communicator.disconnect()


async def test_past_the_inbox_bound_the_socket_says_there_are_more(monkeypatch):
    monkeypatch.setattr(selectors, "INBOX_COUNTED", 2)
    cookie = await session_cookie()
    for _ in range(3):
        await database_sync_to_async(make.interrupt)()
    communicator, connected, _ = await connect("/ws/inbox/", ORIGIN, cookie)
    assert connected
    assert await communicator.receive_json_from() == {"type": "pending", "pending": 3, "mine": 2, "more": True}
    await communicator.disconnect()


async def test_the_badge_counts_only_what_waits_for_this_reader():
    # A reader without the decide permission: everything is pending, nothing waits for them.
    cookie = await session_cookie(reviewer=False)
    await database_sync_to_async(make.interrupt)()
    communicator, connected, _ = await connect("/ws/inbox/", ORIGIN, cookie)
    assert connected
    assert await communicator.receive_json_from() == {"type": "pending", "pending": 1, "mine": 0, "more": False}
    await communicator.disconnect()


async def test_the_thread_socket_says_where_the_log_stands_then_relays_each_event():
    cookie = await session_cookie()
    run = await database_sync_to_async(make.run)()
    await database_sync_to_async(make.event)(run, seq=1)
    from interrupts.models import Thread
    await Thread.objects.filter(pk=run.thread_id).aupdate(last_seq=1)
    communicator, connected, _ = await connect(f"/ws/threads/{run.thread.thread_id}/", ORIGIN, cookie)
    assert connected
    assert await communicator.receive_json_from() == {"type": "hello", "last_seq": 1}
    await database_sync_to_async(relay.event_appended)(run.thread_id, 2, "TEXT_MESSAGE_START")
    assert await communicator.receive_json_from() == {"type": "event", "seq": 2, "event_type": "TEXT_MESSAGE_START"}
    await communicator.disconnect()


async def test_an_unknown_thread_is_refused():
    cookie = await session_cookie()
    communicator, connected, code = await connect("/ws/threads/nope/", ORIGIN, cookie)
    assert not connected and code == 4404


async def test_each_user_hears_their_own_badge_once_the_burst_settles():
    reviewer, outsider = await session_cookie(), await session_cookie(reviewer=False)
    sockets = []
    for cookie in (reviewer, reviewer, outsider):
        communicator, connected, _ = await connect("/ws/inbox/", ORIGIN, cookie)
        assert connected
        assert await communicator.receive_json_from() == {"type": "pending", "pending": 0, "mine": 0, "more": False}
        sockets.append(communicator)
    await database_sync_to_async(make.interrupt)()
    await database_sync_to_async(relay.inbox_changed)(7, 3, "raised")
    for communicator in sockets:
        assert (await communicator.receive_json_from())["type"] == "changed"
    # Both of the reviewer's sockets hear their count; the one who may not decide counts nothing as theirs.
    mine = [await communicator.receive_json_from() for communicator in sockets]
    said = {"type": "mine", "pending": 1, "more": False}
    assert mine == [{**said, "mine": 1}] * 2 + [{**said, "mine": 0}]
    for communicator in sockets:
        await communicator.disconnect()


async def test_a_poke_does_not_wait_behind_the_database_thread():
    cookie = await session_cookie()
    communicator, connected, _ = await connect("/ws/inbox/", ORIGIN, cookie)
    assert connected
    await communicator.receive_json_from()
    # The one thread every thread-sensitive database call shares, busy until released (a slow stream's write).
    occupied, release = threading.Event(), threading.Event()

    def hold() -> bool:
        occupied.set()
        return release.wait(10)

    busy = asyncio.ensure_future(sync_to_async(hold)())
    try:
        await until(occupied.is_set)
        await get_channel_layer().group_send(relay.INBOX_GROUP, {
            "type": "inbox.changed", "thread": 7, "seq": 3, "reason": "raised", "pending": 5})
        assert await communicator.receive_json_from() == {
            "type": "changed", "reason": "raised", "thread": 7, "pending": 5}
        assert not busy.done()  # heard while the thread was still taken
    finally:
        release.set()
        await busy
    await communicator.disconnect()


async def thread_socket():
    cookie = await session_cookie()
    run = await database_sync_to_async(make.run)()
    communicator, connected, _ = await connect(f"/ws/threads/{run.thread.thread_id}/", ORIGIN, cookie)
    assert connected
    assert (await communicator.receive_json_from())["type"] == "hello"
    return run, communicator


@database_sync_to_async
def append_in_one_transaction(thread_pk: int, seqs: range) -> None:
    with transaction.atomic():
        for seq in seqs:
            relay.event_appended(thread_pk, seq, "TEXT_MESSAGE_CONTENT")


async def test_with_a_supervisor_here_broadcasts_leave_from_its_loop_in_commit_order():
    run, communicator = await thread_socket()
    wakeup.register(supervisor._Listener(supervisor.Supervisor()))  # this loop's; its ticks are not needed
    try:
        await append_in_one_transaction(run.thread_id, range(2, 22))
        assert [(await communicator.receive_json_from())["seq"] for _ in range(20)] == list(range(2, 22))
    finally:
        wakeup.register(None)
    await communicator.disconnect()


async def test_a_supervisor_whose_loop_stopped_does_not_swallow_broadcasts():
    run, communicator = await thread_socket()
    stopped = asyncio.new_event_loop()
    try:
        wakeup.register(supervisor._Listener(await asyncio.to_thread(
            stopped.run_until_complete, _supervisor())))
        await append_in_one_transaction(run.thread_id, range(2, 3))
        assert (await communicator.receive_json_from())["seq"] == 2
    finally:
        wakeup.register(None)
        stopped.close()
    await communicator.disconnect()


async def _supervisor() -> supervisor.Supervisor:
    return supervisor.Supervisor()


async def test_after_the_last_inbox_socket_left_the_next_one_still_hears_changes():
    cookie = await session_cookie()
    for _ in range(2):  # the process leaves the layer's group with its last socket, and joins again
        communicator, connected, _ = await connect("/ws/inbox/", ORIGIN, cookie)
        assert connected
        assert (await communicator.receive_json_from())["type"] == "pending"
        await database_sync_to_async(relay.inbox_changed)(7, 3, "decided")
        assert (await communicator.receive_json_from())["reason"] == "decided"
        await communicator.disconnect()


async def test_a_page_says_which_card_it_has_open_and_every_inbox_hears_who_looks():
    interrupt = await database_sync_to_async(make.interrupt)()
    looker, watcher = await session_cookie(), await session_cookie()
    first, connected, _ = await connect("/ws/inbox/", ORIGIN, looker)
    assert connected
    second, connected, _ = await connect("/ws/inbox/", ORIGIN, watcher)
    assert connected
    for socket in (first, second):
        assert (await socket.receive_json_from())["type"] == "pending"
    # Junk is ignored: not JSON, a wrong shape, a huge message, ids that are no ids.
    for junk in ("not json", '{"type": "viewing", "interrupts": "all"}', '{"type": "viewing", "interrupts": [true]}',
                 '{"type": "viewing", "interrupts": [' + "1," * 3000 + "1]}"):
        await first.send_to(text_data=junk)
    await first.send_json_to({"type": "viewing", "interrupts": [interrupt.pk]})
    heard = await second.receive_json_from()
    assert heard["type"] == "attention" and heard["interrupt"] == interrupt.pk
    assert len(heard["viewers"]) == 1 and heard["claim"] is None
    # Closing the page closes the card: everyone hears nobody looks any more.
    await first.disconnect()
    heard = await second.receive_json_from()
    assert heard == {"type": "attention", "interrupt": interrupt.pk, "claim": None, "viewers": []}
    await second.disconnect()


async def test_a_socket_saying_too_much_is_heard_past_its_burst_only_for_its_last_word(monkeypatch):
    from interrupts.live import consumers
    from interrupts.models import Presence

    handled, sockets, receive = [], [], consumers.InboxConsumer.receive

    async def counted(self, *args, **kwargs):
        sockets.append(self)
        await receive(self, *args, **kwargs)
        handled.append(kwargs.get("text_data"))

    monkeypatch.setattr(consumers.InboxConsumer, "receive", counted)
    interrupts = [await database_sync_to_async(make.interrupt)() for _ in range(13)]
    cookie = await session_cookie()
    chatty, connected, _ = await connect("/ws/inbox/", ORIGIN, cookie)
    assert connected
    await chatty.receive_json_from()
    for interrupt in interrupts[:12]:
        await chatty.send_json_to({"type": "viewing", "interrupts": [interrupt.pk]})

    def held():
        return list(Presence.objects.values_list("interrupt_id", flat=True))

    async def holds(pks):
        return await database_sync_to_async(held)() == pks

    # Every message was handled (in order, one at a time): the last one said within the burst is
    # what the server holds; of the two past it, the latest waits for the window to end.
    await until(lambda: len(handled) == 12)
    assert await database_sync_to_async(held)() == [interrupts[9].pk]
    socket = sockets[-1]
    loop = asyncio.get_running_loop()
    assert socket._latest and 0 < socket._later.when() - loop.time() <= socket.VIEWING_WINDOW
    # The window ends (its timer, run now): the page's last word holds, and it counts in the new window.
    socket._later.cancel()
    socket._say_latest()
    await until(lambda: holds([interrupts[11].pk]))
    # Past the burst again; the window ends and, in the same turn of the loop, a newer message is taken
    # first: the held one, older, must not be heard after it.
    for interrupt in interrupts[:10]:
        await chatty.send_json_to({"type": "viewing", "interrupts": [interrupt.pk]})
    await until(lambda: len(handled) == 22)
    await chatty.send_json_to({"type": "viewing", "interrupts": [interrupts[10].pk]})
    await until(lambda: len(handled) == 23 and socket._latest is not None)
    socket._later.cancel()
    socket._say_latest()
    await socket.receive(text_data=json.dumps({"type": "viewing", "interrupts": [interrupts[12].pk]}))
    await socket._held_task
    assert await database_sync_to_async(held)() == [interrupts[12].pk]
    # Past the burst again, then the page closes before the window ends: nothing held is heard after.
    for interrupt in interrupts[:10]:
        await chatty.send_json_to({"type": "viewing", "interrupts": [interrupt.pk]})
    await chatty.send_json_to({"type": "viewing", "interrupts": [interrupts[12].pk]})
    await until(lambda: len(handled) == 35)
    assert socket._latest is not None
    await chatty.disconnect()
    await until(lambda: socket._gone)
    socket._say_latest()  # a timer that fired beside the close
    await socket._held_task
    assert await database_sync_to_async(held)() == []


async def test_a_socket_whose_session_ended_is_not_heard_saying_what_it_has_open():
    # Logged out in another tab: until some change starts a count round the socket stays open,
    # and must not keep showing its user as looking at cards (or renew their claims).
    from django.contrib.sessions.models import Session

    from interrupts.models import Presence

    interrupt = await database_sync_to_async(make.interrupt)()
    cookie = await session_cookie()
    socket, connected, _ = await connect("/ws/inbox/", ORIGIN, cookie)
    assert connected
    await socket.receive_json_from()
    await database_sync_to_async(lambda: Session.objects.all().delete())()
    await socket.send_json_to({"type": "viewing", "interrupts": [interrupt.pk]})
    assert (await socket.receive_output()) == {"type": "websocket.close", "code": 4401}
    assert not await database_sync_to_async(Presence.objects.exists)()


async def test_only_staff_sockets_hear_that_webhook_deliveries_changed():
    staff, colleague = await session_cookie(), await session_cookie()
    await database_sync_to_async(lambda: type(make.user()).objects.filter(
        pk=int(SessionStore(staff[1].decode().split("=")[1])[SESSION_KEY])).update(is_staff=True))()
    watching, connected, _ = await connect("/ws/inbox/", ORIGIN, staff)
    assert connected
    other, connected, _ = await connect("/ws/inbox/", ORIGIN, colleague)
    assert connected
    for socket in (watching, other):
        await socket.receive_json_from()

    def changed():
        with transaction.atomic():
            relay.deliveries_changed()

    await database_sync_to_async(changed)()
    assert await watching.receive_json_from() == {"type": "deliveries"}
    # Told to every socket in turn, after the deliveries: the first thing the other hears is this change.
    await database_sync_to_async(relay.inbox_changed)(7, 3, "raised")
    assert (await other.receive_json_from())["type"] == "changed"
    await watching.disconnect()
    await other.disconnect()
