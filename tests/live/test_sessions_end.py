"""Sessions end everywhere: a user's open sockets close within a second once they may no longer read.

Through the full ASGI stack (routing, session login, origin check) and the
test's channel layer. Each close is awaited with a one-second deadline, and
whatever the socket heard before it is checked: nothing said after the change.
The same over real servers, one process or two: tests/e2e/test_sessions_end.py.
"""

import asyncio
import threading
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from interrupts.live import relay
from interrupts.live.consumers import Inboxes, sockets_db
from project.asgi import application

from .. import factories as make
from ..waiting import until
from .sockets import Communicator

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1:8000")
LOG_IN_FIRST = {"type": "websocket.close", "code": 4401}


def _session(user, expiry: int | None = None) -> str:
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    if expiry is not None:
        session.set_expiry(expiry)
    session.save()
    return session.session_key


@database_sync_to_async
def reviewer_with_sessions(count: int = 1, expiry: int | None = None):
    user = make.user()
    return user, [_session(user, expiry) for _ in range(count)]


async def open_socket(path: str, session_key: str) -> Communicator:
    cookie = (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session_key}".encode())
    communicator = Communicator(application, path, headers=[ORIGIN, cookie])
    connected, _ = await communicator.connect()
    assert connected
    first = await communicator.receive_json_from()
    assert first["type"] in ("pending", "hello")
    return communicator


async def closed_within(communicator: Communicator, seconds: float = 1.0) -> list[dict]:
    """What the socket heard before it closed with "log in first", which it must within ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    heard = []
    while True:
        left = deadline - loop.time()
        assert left > 0, f"still open after {seconds} s; heard {heard}"
        try:
            output = await communicator.receive_output(timeout=left)
        except TimeoutError:
            raise AssertionError(f"still open after {seconds} s; heard {heard}") from None
        if output["type"] == "websocket.close":
            assert output == LOG_IN_FIRST
            return heard
        heard.append(output)


@database_sync_to_async
def log_out(session_key: str, everywhere: bool = False) -> None:
    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = session_key
    response = client.post(reverse("logout"), {"everywhere": "1"} if everywhere else {})
    assert response.status_code == 302
    assert not Session.objects.filter(session_key=session_key).exists()


@database_sync_to_async
def broadcast_everything(thread_pk: int) -> None:
    """What a busy deployment says right after the change: a new event on the thread, and the inbox changed."""
    with transaction.atomic():
        relay.event_appended(thread_pk, 99, "TEXT_MESSAGE_CONTENT")
        relay.inbox_changed(thread_pk, 99, relay.Reason.RAISED)


def _content(heard: list[dict]) -> list[dict]:
    return [m for m in heard if '"event"' in m.get("text", "") or '"changed"' in m.get("text", "")]


async def test_logging_out_closes_that_sessions_sockets_and_they_hear_nothing_after():
    user, [key] = await reviewer_with_sessions()
    run = await database_sync_to_async(make.run)()
    inbox = await open_socket("/ws/inbox/", key)
    thread = await open_socket(f"/ws/threads/{run.thread.thread_id}/", key)
    await log_out(key)
    # Broadcast before either socket could have closed: neither may hear it.
    await broadcast_everything(run.thread_id)
    for socket in (inbox, thread):
        assert _content(await closed_within(socket)) == []
        assert await socket.receive_nothing(timeout=0.3)


async def test_logging_out_one_browser_leaves_the_users_other_sessions_open():
    user, [here, elsewhere] = await reviewer_with_sessions(2)
    run = await database_sync_to_async(make.run)()
    mine = [await open_socket(p, here) for p in ("/ws/inbox/", f"/ws/threads/{run.thread.thread_id}/")]
    other = [await open_socket(p, elsewhere) for p in ("/ws/inbox/", f"/ws/threads/{run.thread.thread_id}/")]
    await log_out(here)
    for socket in mine:
        await closed_within(socket)
    await broadcast_everything(run.thread_id)
    heard = [await socket.receive_json_from() for socket in other]
    assert heard[0]["type"] == "changed"
    assert heard[1] == {"type": "event", "seq": 99, "event_type": "TEXT_MESSAGE_CONTENT"}
    for socket in other:
        await socket.disconnect()


async def test_logging_out_everywhere_closes_every_session_of_that_person_only():
    user, [here, elsewhere] = await reviewer_with_sessions(2)
    colleague, [theirs] = await reviewer_with_sessions()
    run = await database_sync_to_async(make.run)()
    path = f"/ws/threads/{run.thread.thread_id}/"
    sockets = [await open_socket(p, key) for key in (here, elsewhere) for p in ("/ws/inbox/", path)]
    kept = await open_socket(path, theirs)
    await log_out(here, everywhere=True)
    await broadcast_everything(run.thread_id)
    for socket in sockets:
        assert _content(await closed_within(socket)) == []
    assert not await Session.objects.filter(session_key=elsewhere).aexists()
    assert (await kept.receive_json_from())["type"] == "event"
    await kept.disconnect()


@pytest.mark.parametrize("change", ["deactivated", "deleted", "password changed", "sessions deleted"])
async def test_a_user_who_may_no_longer_read_loses_every_socket_and_a_colleague_keeps_theirs(change):
    user, keys = await reviewer_with_sessions(2)
    colleague, [theirs] = await reviewer_with_sessions()
    run = await database_sync_to_async(make.run)()
    path = f"/ws/threads/{run.thread.thread_id}/"
    sockets = [await open_socket(p, key) for key in keys for p in ("/ws/inbox/", path)]
    kept = [await open_socket(p, theirs) for p in ("/ws/inbox/", path)]

    def apply():
        found = get_user_model().objects.get(pk=user.pk)
        if change == "deactivated":
            found.is_active = False
            found.save()
        elif change == "deleted":
            found.delete()
        elif change == "password changed":
            found.set_password("a new one, set by staff")
            found.save()
        else:  # as an admin ending them by hand, in one statement
            Session.objects.filter(session_key__in=keys).delete()

    await database_sync_to_async(apply)()
    await broadcast_everything(run.thread_id)
    for socket in sockets:
        assert _content(await closed_within(socket)) == []
    assert (await kept[1].receive_json_from())["type"] == "event"
    for socket in kept:
        await socket.disconnect()


async def test_a_session_that_runs_out_closes_its_sockets_when_it_does():
    user, [key] = await reviewer_with_sessions(expiry=2)
    run = await database_sync_to_async(make.run)()
    sockets = [await open_socket(p, key) for p in ("/ws/inbox/", f"/ws/threads/{run.thread.thread_id}/")]
    expires = await Session.objects.values_list("expire_date", flat=True).aget(session_key=key)
    # Nothing is announced: each socket checks again at its session's expiry, and closes then, not before.
    await closed_within(sockets[0], seconds=(expires - timezone.now()).total_seconds() + 1)
    assert timezone.now() >= expires
    await closed_within(sockets[1])


async def test_a_session_extended_meanwhile_keeps_its_sockets(monkeypatch):
    from interrupts.live import standing

    checked, check = [], standing.check

    def noted(*args):
        found = check(*args)
        checked.append((timezone.now(), found))
        return found

    monkeypatch.setattr(standing, "check", noted)
    user, [key] = await reviewer_with_sessions(expiry=2)
    socket = await open_socket("/ws/inbox/", key)
    first = await Session.objects.values_list("expire_date", flat=True).aget(session_key=key)
    await Session.objects.filter(session_key=key).aupdate(expire_date=timezone.now() + timedelta(hours=1))
    # Past the first expiry: the socket checked, found its session extended, and stayed open.
    [(_when, found), *_] = await until(lambda: [(when, found) for when, found in checked if when >= first],
                                        timeout=(first - timezone.now()).total_seconds() + 5)
    assert found is not None and found[1] > first + timedelta(minutes=30)
    await database_sync_to_async(relay.inbox_changed)(7, 3, relay.Reason.DECIDED)
    assert (await socket.receive_json_from())["type"] == "changed"
    await socket.disconnect()


@pytest.mark.parametrize("path", ["/ws/inbox/", "/ws/threads/{thread}/"])
async def test_a_socket_whose_session_ends_while_it_connects_is_told_to_log_in(path, monkeypatch):
    # The logout lands between the login check (channels' AuthMiddleware) and the moment the socket
    # hears of changes, so its broadcast finds no socket: the socket's own check must catch it.
    import channels.auth

    user, [key] = await reviewer_with_sessions()
    run = await database_sync_to_async(make.run)()
    resolve = channels.auth.get_user

    async def logged_out_right_after(scope):
        found = await resolve(scope)
        await log_out(key)
        return found

    monkeypatch.setattr(channels.auth, "get_user", logged_out_right_after)
    cookie = (b"cookie", f"{settings.SESSION_COOKIE_NAME}={key}".encode())
    path = path.format(thread=run.thread.thread_id)
    communicator = Communicator(application, path, headers=[ORIGIN, cookie])
    connected, _ = await communicator.connect()
    assert connected  # accepted, so that the page reads the code
    assert await communicator.receive_output() == LOG_IN_FIRST


async def test_a_socket_opened_while_a_count_round_reads_the_sessions_is_not_taken_for_logged_out():
    # ci41: a page opened as its process recounted the badges was told "logged out" (4401): the round judged
    # every socket by the sessions it had read, and the new socket's was not among them.
    user, [first, second] = await reviewer_with_sessions(2)
    run = await database_sync_to_async(make.run)()
    await open_socket("/ws/inbox/", first)
    # The sockets' database threads held: the round's read of the sessions waits, and a socket connects meanwhile.
    release = threading.Event()
    executor = sockets_db.executor()
    held = [executor.submit(release.wait) for _ in range(sockets_db.threads.get(connection.vendor, 1))]
    try:
        await broadcast_everything(run.thread_id)
        inboxes = Inboxes.here()
        await until(lambda: inboxes.counting)
        cookie = (b"cookie", f"{settings.SESSION_COOKIE_NAME}={second}".encode())
        late = Communicator(application, "/ws/inbox/", headers=[ORIGIN, cookie])
        assert (await late.connect())[0]
        await until(lambda: len(inboxes.sockets.get(user.pk, ())) == 2)
    finally:
        release.set()
    for job in held:
        await asyncio.wrap_future(job)
    await until(lambda: inboxes.round.done())
    # A change after the round: the late socket hears it, and nothing closed it before.
    await broadcast_everything(run.thread_id)
    heard = []
    while not any('"changed"' in m.get("text", "") for m in heard):
        heard.append(await late.receive_output())
        assert heard[-1]["type"] != "websocket.close", heard
    await late.disconnect()


def test_the_notifications_page_offers_log_out_everywhere(client):
    user = make.user()
    client.force_login(user)
    page = client.get(reverse("notification-settings")).content.decode()
    form = page[page.index('data-testid="logout-everywhere"') - 60:]
    assert f'action="{reverse("logout")}"' in form[:200] and 'name="everywhere" value="1"' in form
