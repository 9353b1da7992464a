import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from interrupts.hub import supervisor, wakeup

WORKER = "supervisor-under-test"


@pytest.fixture
async def boss():
    """A supervisor on the test's event loop, not started: the test calls its ``tick``."""
    before = wakeup.registered()
    made = supervisor.Supervisor(worker=WORKER)
    yield made
    await made.stop()
    wakeup.register(before)
    await sync_to_async(connections.close_all)()  # the worker thread's, or PostgreSQL keeps the test database
