"""Work a request leaves until its reply has been sent: a decision counts once its answer has left.

A decision committed by a process that dies before replying was never
acknowledged: nobody was told it was taken, so it must not reach the agent
(issue 24). The decide views record it as unacknowledged and ask, here, to
acknowledge it once the reply's last byte has been handed to the server
(``AfterReply``, wrapped around the HTTP app in ``project.asgi``). Where no
``AfterReply`` runs (Django's test client, a management command) the reply is
the caller's own return value, and the decision counts at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
import time

from asgiref.sync import sync_to_async

from . import dbthreads, decisions

logger = logging.getLogger(__name__)

SCOPE_KEY = "countersign.after_reply"


class _Reply:
    """A request's work for after its reply, and whether that reply is over: sent, or its client gone.

    A client that leaves mid-request is not a process that died: the decision
    it made stands, so what is left runs when the request ends, and work asked
    for after that (a view's thread outliving a cancelled request) runs at once.
    """

    def __init__(self) -> None:
        self.callbacks: list = []
        self.over = False
        self.lock = threading.Lock()

    def add(self, callback) -> bool:
        """Keep ``callback`` for later; False (the caller runs it now) once the reply is over."""
        with self.lock:
            if not self.over:
                self.callbacks.append(callback)
            return not self.over

    def end(self) -> list:
        """The reply is over: the work still waiting, taken."""
        with self.lock:
            self.over = True
            work, self.callbacks = self.callbacks, []
        return work


def deferrable(request) -> bool:
    """Whether ``request`` is served through ``AfterReply``, so work can wait for its reply to be sent."""
    scope = getattr(request, "scope", None)
    return isinstance(scope, dict) and isinstance(scope.get(SCOPE_KEY), _Reply)


def after_reply(request, callback) -> None:
    """Call ``callback()`` (synchronous, it may use the database) once ``request``'s reply has been sent."""
    if not request.scope[SCOPE_KEY].add(callback):
        _run([callback])  # the request is over already (its client left): nothing to wait for


def acknowledge_after(request, decided) -> None:
    """Acknowledge ``decided`` (decisions taken with ``unsent=deferrable(request)``) once the reply has left."""
    if decided and deferrable(request):
        after_reply(request, functools.partial(decisions.acknowledge, list(decided)))


class AfterReply:
    """ASGI middleware: runs each request's ``after_reply`` callbacks once its whole body was handed to the server."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        reply = _Reply()

        async def sending(message):
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                _start(reply.end())

        try:
            await self.app({**scope, SCOPE_KEY: reply}, receive, sending)
        finally:
            _start(reply.end())  # the client left before its reply: this process lives, so the work stands


def _start(work: list) -> None:
    if not work:
        return
    # A task of its own, in a fresh context: the server tells the request it is over
    # once its reply is out, and Django then cancels what the request still awaits.
    task = asyncio.get_running_loop().create_task(
        sync_to_async(_run, thread_sensitive=False)(work), context=contextvars.Context())
    _running.add(task)
    task.add_done_callback(_running.discard)


#: Callbacks under way (the event loop keeps only weak references to tasks).
_running: set = set()


#: Seconds between tries of work after a reply (a database restarting): it is already told, so it must not be lost.
RETRY_DELAYS = (0.5, 2.0, 5.0)


def _run(work: list) -> None:
    for callback in work:
        for delay in (*RETRY_DELAYS, None):
            try:
                callback()
                break
            except Exception:
                logger.exception("work after the reply failed%s", "" if delay is None else f"; again in {delay} s")
                if delay is None:
                    break  # left to the sweep (decisions.drop_unacknowledged)
                time.sleep(delay)
            finally:
                # A pool thread, not a request's: nothing else gives its connection back, and
                # one a fault broke must not be used again.
                dbthreads.give_back()
