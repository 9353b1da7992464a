"""Work on a connection PostgreSQL killed is done again on a fresh one: a GET (web.middleware), a stream write.

PostgreSQL only, selected explicitly: the fault is pg_terminate_backend of this
test's own connection, which SQLite has no counterpart of. CI runs this in its
PostgreSQL pass; the SQLite pass's faults are in tests/e2e/test_database_faults.py.
"""

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from .. import factories

POSTGRES = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
pytestmark = [pytest.mark.skipif(not POSTGRES, reason="PostgreSQL's own fault: runs in CI's PostgreSQL pass"),
              pytest.mark.django_db(transaction=True)]


def kill_this_connection() -> None:
    """Terminate the backend serving this thread's connection, from another session, as an admin or a restart would."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)


@pytest.mark.parametrize("path", ["/api/threads/", "/threads/", "/inbox/"])
def test_a_read_on_a_killed_connection_is_served_on_a_fresh_one(path):
    client = Client()
    client.force_login(factories.user())
    kill_this_connection()
    response = client.get(path)
    assert response.status_code == 200, response.content[:500]


def test_a_write_on_a_killed_connection_is_refused_503_with_retry_after_not_retried():
    client = Client(enforce_csrf_checks=False)
    client.force_login(factories.user())
    kill_this_connection()
    response = client.post("/api/threads/", {"agent": "nobody", "message": "hi"}, content_type="application/json")
    # Not served again: a write that may have reached the database is the caller's to repeat.
    assert response.status_code == 503, response.content[:500]
    assert response.json()["code"] == "DATABASE_UNAVAILABLE" and int(response["Retry-After"]) >= 1
    # What a server does as the request ends (the test client leaves it out): the dead connection goes.
    connection.close_if_unusable_or_obsolete()
    assert Client().get("/accounts/login/").status_code == 200


def test_a_stream_write_on_a_killed_connection_is_made_again_on_a_fresh_one(caplog):
    """The streamer's writes (``RunStreamer._persist``) outlive a connection PostgreSQL terminated under them."""
    import asyncio

    from interrupts.hub import streaming
    from interrupts.models import Run

    run = Run.objects.select_related("thread", "agent").get(pk=factories.run().pk)
    tries, wrote = [], []

    def write() -> int:
        connection.ensure_connection()
        tries.append(connection.connection.info.backend_pid)
        if len(tries) == 1:
            kill_this_connection()  # the first try's connection is terminated just before it writes
        updated = Run.objects.filter(pk=run.pk).update(last_error="written")
        wrote.append(tries[-1])
        return updated

    assert asyncio.run(streaming.RunStreamer(run, "worker")._persist(write)) == 1
    assert Run.objects.get(pk=run.pk).last_error == "written"
    assert len(tries) == 2 and wrote == [tries[1]] and tries[1] != tries[0]
    assert "trying again on a fresh connection" in caplog.text
