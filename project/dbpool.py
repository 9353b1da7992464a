"""How the PostgreSQL pool tries a connection before handing it out, without a round trip when it can."""

from __future__ import annotations

import select

from psycopg_pool import ConnectionPool


def check_connection(connection) -> None:
    """Raise if ``connection`` is dead, as ``ConnectionPool.check_connection`` does, asking the server only when needed.

    An idle connection has nothing to read: when PostgreSQL ends a session (a
    restart, ``pg_terminate_backend``) it sends the error and closes the
    socket, which then reads as ready. Only then is the server asked (the
    pool's own check, an empty query). Asking every time cost a round trip per
    checkout, and under load the thread waited for the GIL again after it:
    about 8% of the server's time with 50 runs ending at once.
    """
    if connection.closed or connection.broken:
        raise ConnectionError("the connection is closed")
    poll = select.poll()  # not select(): a process with a thousand sockets has descriptors past its limit
    poll.register(connection.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    if poll.poll(0):
        ConnectionPool.check_connection(connection)


class ReplaceAllOnOneDead:
    """The pool's check for the database ``alias``: one dead connection, and every idle one is replaced.

    The pool waits after each connection that fails its check before it tries
    the next (psycopg_pool's backoff: 1 s, then 2, then 4), so a restart that
    killed four idle connections cost the next request 7 s or its pool
    timeout. One dead connection nearly always means the server ended them
    all; the pool is drained then, and the next one handed out is a new one.
    """

    def __init__(self, alias: str = "default") -> None:
        self.alias = alias

    def __call__(self, connection) -> None:
        try:
            check_connection(connection)
        except Exception:
            from django.db import connections  # the pool is Django's, made lazily per alias

            connections[self.alias].pool.drain()
            raise

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.alias!r})"
