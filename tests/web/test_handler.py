"""The ASGI handler (web/handler.py): a request's middleware and view in one trip, on a thread kept for the next."""

import json
import threading

import pytest
from asgiref.sync import iscoroutinefunction, sync_to_async
from channels.testing import HttpCommunicator
from django.conf import settings
from django.core.signals import request_finished, request_started
from django.db import connection
from django.db.backends.signals import connection_created
from django.test import RequestFactory
from django.utils.deprecation import MiddlewareMixin

from interrupts.web.handler import KeptThreadsHandler, RequestThreads

from .. import factories

pytestmark = pytest.mark.django_db(transaction=True)


class Witness(MiddlewareMixin):
    """Innermost, able to run either way: notes on which thread, and whether Django chained it async."""

    seen: list = []

    def process_request(self, request):
        Witness.seen.append((threading.current_thread(), iscoroutinefunction(self)))


@pytest.fixture
def handler(settings):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.Witness"]
    Witness.seen = []
    return KeptThreadsHandler()


async def get(app, path: str, headers=()) -> int:
    communicator = HttpCommunicator(app, "GET", path, headers=[(b"host", b"127.0.0.1"), *headers])
    status = (await communicator.get_response())["status"]
    await communicator.wait()  # the request's end (closing the response), as a server lets it run
    return status


def listening(signal):
    """Threads that ran ``signal``'s receivers, in order, while connected."""
    threads = []

    def receiver(**kwargs):
        threads.append(threading.current_thread())

    signal.connect(receiver, weak=False)
    return threads, lambda: signal.disconnect(receiver)


async def test_middleware_runs_synchronously_on_the_request_s_own_thread(handler):
    started, stop = listening(request_started)
    try:
        assert await get(handler, "/accounts/login/") == 200
    finally:
        stop()
    [(thread, chained_async)] = Witness.seen
    # Chained for its synchronous path, so no hop to the event loop between one middleware and the next,
    # and on the thread the request started on (not the event loop's).
    assert chained_async is False
    assert started == [thread] and thread is not threading.current_thread()


async def test_requests_one_after_another_reuse_one_thread(handler):
    started, stop_started = listening(request_started)
    finished, stop_finished = listening(request_finished)
    try:
        for _ in range(5):
            assert await get(handler, "/accounts/login/") == 200
    finally:
        stop_started()
        stop_finished()
    assert len(started) == len(finished) == 5
    assert len(set(started)) == 1 and set(finished) == set(started)
    assert started[0].is_alive()


@pytest.mark.skipif(settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3",
                    reason="PostgreSQL's connections come from its pool: tests/project/test_dbpool.py")
async def test_on_sqlite_requests_after_the_first_open_no_connection(handler):
    key = await sync_to_async(lambda: factories.token(factories.user()))()
    headers = [(b"authorization", f"Token {key}".encode())]
    assert await get(handler, "/api/agents/", headers) == 200
    opened = []

    def count(sender, connection, **kwargs):
        opened.append(threading.current_thread())

    connection_created.connect(count, weak=False)
    try:
        for _ in range(5):
            assert await get(handler, "/api/agents/", headers) == 200
    finally:
        connection_created.disconnect(count)
    assert opened == []


def test_threads_are_lent_one_request_at_a_time_and_kept_up_to_the_bound():
    threads = RequestThreads(kept=2)
    first, second, third = threads.take(), threads.take(), threads.take()
    assert len({first, second, third}) == 3  # requests at once never share one
    for executor in (first, second, third):
        assert executor.submit(threading.current_thread).result() is not threading.current_thread()
    threads.give_back(first)
    threads.give_back(second)
    threads.give_back(third)  # past the bound: its thread ends
    assert threads.idle == [first, second]
    assert threads.take() is second and threads.take() is first
    with pytest.raises(RuntimeError):
        third.submit(print)


@pytest.mark.skipif(settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
                    reason="SQLite's connections stay with their thread: no pool to give back to")
def test_an_answer_that_streams_gives_back_its_pooled_connection_before_it_streams(handler):
    # A stream (an AG-UI run through the gateway) lasts minutes: held until its end, the connections its
    # requests had taken left none in the pool for anyone else.
    key = factories.token(factories.user())
    auth = {"HTTP_AUTHORIZATION": f"Token {key}"}
    listed = handler.answer(RequestFactory().get("/api/agents/", **auth))
    assert listed.status_code == 200 and not listed.streaming
    assert connection.connection is not None  # a plain answer's goes back when its request ends, as Django does
    exported = handler.answer(RequestFactory().get("/api/audit/export/", **auth))
    assert exported.status_code == 200 and exported.streaming
    assert connection.connection is None  # back in the pool before the first byte streams
    assert json.loads(b"".join(exported.streaming_content))["head"]  # what streams takes a connection then
