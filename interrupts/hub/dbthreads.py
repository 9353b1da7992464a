"""Bounded thread pools, one per purpose, that run ORM work off the event loop and release its connection."""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.db import connection

# Why pools of their own: through asgiref's default (thread-sensitive)
# executor every ORM call of the process shares one thread, so 50 runs writing
# to PostgreSQL queued behind each other, and requests and streams behind a
# notification round. A few threads are enough: the work holds the GIL except
# while it waits for the database, and more threads only fight over it.
# SQLite takes one writer at a time and makes a blocked one sleep in steps of
# milliseconds, so there one thread writes for all.


def give_back() -> None:
    """Done with this thread's connection for now: for threads that never see a request end.

    Django closes connections when a request ends. Here a PostgreSQL
    connection goes back to the pool (a thread must not hold one while idle),
    and one an error may have broken is closed, not reused. SQLite's stays
    open: reopening it cost ~1 ms a call.
    """
    if not connection.in_atomic_block and (connection.vendor == "postgresql" or connection.errors_occurred):
        connection.close()


def released(function: Callable) -> Callable:
    """``function``, giving its thread's connection back when done (``give_back``)."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            give_back()
    return call


class Pool:
    """A bounded executor for one purpose, started on first use: ``pool(function)`` is a coroutine function."""

    def __init__(self, name: str, threads: dict[str, int] | None = None):
        self.name = name
        self.threads = threads or {}  # by database vendor; one thread where it names none
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(self.threads.get(connection.vendor, 1),
                                                        thread_name_prefix=f"countersign-{self.name}")
        return self._executor

    def __call__(self, function: Callable) -> Callable[..., Awaitable]:
        return sync_to_async(released(function), thread_sensitive=False, executor=self.executor())
