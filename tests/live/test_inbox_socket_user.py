"""An inbox socket follows its user's rights and session while it stays open, not the user it connected with.

``Inboxes._rounds`` counts "mine" with the first socket's ``scope["user"]``,
loaded once at connect: its ``_perm_cache`` (ModelBackend) and
``_countersign_group_ids`` (eligibility._group_ids) and ``is_active`` never
change afterwards. Nothing re-checks the session either, so a socket whose
user logged out (session deleted) or was deactivated keeps hearing every
change and a count of what waits "for them".
"""

import asyncio

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.models import Group
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session

from interrupts.live import consumers, relay
from project.asgi import application

from .. import factories as make
from ..waiting import until
from .sockets import Communicator

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1:8000")


@database_sync_to_async
def login():
    user = make.user()
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return user, session.session_key, (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session.session_key}".encode())


async def inbox(cookie):
    communicator = Communicator(application, "/ws/inbox/", headers=[ORIGIN, cookie])
    connected, _ = await communicator.connect()
    assert connected
    return communicator


@pytest.mark.parametrize("change", ["left Reviewers", "deactivated"])
async def test_the_badge_follows_a_reviewer_who_lost_the_right_to_decide(change):
    user, _key, cookie = await login()
    await database_sync_to_async(make.interrupt)()
    communicator = await inbox(cookie)
    assert await communicator.receive_json_from() == {"type": "pending", "pending": 1, "mine": 1, "more": False}

    @database_sync_to_async
    def lose_it():
        if change == "deactivated":
            get_user_model().objects.filter(pk=user.pk).update(is_active=False)
        else:
            user.groups.remove(Group.objects.get(name="Reviewers"))
        make.interrupt()
        relay.inbox_changed(7, 3, "raised")

    await lose_it()
    assert (await communicator.receive_json_from())["type"] == "changed"
    mine = await communicator.receive_json_from()
    await communicator.disconnect()
    assert mine == {"type": "mine", "pending": 2, "mine": 0, "more": False}  # nothing waits for them any more


async def test_a_socket_whose_session_ended_hears_no_more_changes():
    _user, key, cookie = await login()
    communicator = await inbox(cookie)
    assert (await communicator.receive_json_from())["type"] == "pending"
    await database_sync_to_async(Session.objects.filter(session_key=key).delete)()  # logged out
    await database_sync_to_async(relay.inbox_changed)(7, 3, "raised")
    # The change's own poke may still come; the count round after it closes the socket.
    heard = []
    while not heard or heard[-1]["type"] != "websocket.close":
        heard.append(await communicator.receive_output())
    assert heard[-1]["code"] == consumers.UNAUTHENTICATED
    assert all('"mine"' not in (h.get("text") or "") for h in heard)  # no count for a logged-out socket
    await database_sync_to_async(relay.inbox_changed)(7, 4, "raised")
    with pytest.raises(asyncio.TimeoutError):
        await communicator.receive_output(timeout=1.5)  # closed: nothing more


async def test_a_socket_whose_connect_failed_is_not_kept(monkeypatch):
    _user, _key, cookie = await login()

    def broken():
        raise RuntimeError("database went away")

    monkeypatch.setattr(consumers.selectors, "pending_count", broken)
    communicator = Communicator(application, "/ws/inbox/", headers=[ORIGIN, cookie])
    try:
        await communicator.connect()  # accepted: the count fails after the accept
        await communicator.receive_output(timeout=1)  # the consumer's exception surfaces here
    except Exception:
        pass
    await until(communicator.future.done)  # the consumer's task ended: what it does on its way out is done
    here = consumers.Inboxes.here()
    kept = [c for found in here.sockets.values() for c in found]
    for task in here.listening:  # clean up what the leak left behind
        task.cancel()
    assert kept == []  # the consumer is gone, but Inboxes still writes every broadcast to it
