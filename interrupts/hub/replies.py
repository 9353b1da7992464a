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

import functools
import logging

from asgiref.sync import sync_to_async

from . import decisions

logger = logging.getLogger(__name__)

SCOPE_KEY = "countersign.after_reply"


def deferrable(request) -> bool:
    """Whether ``request`` is served through ``AfterReply``, so work can wait for its reply to be sent."""
    scope = getattr(request, "scope", None)
    return isinstance(scope, dict) and isinstance(scope.get(SCOPE_KEY), list)


def after_reply(request, callback) -> None:
    """Call ``callback()`` (synchronous, it may use the database) once ``request``'s reply has been sent."""
    request.scope[SCOPE_KEY].append(callback)


def acknowledge_after(request, decided) -> None:
    """Acknowledge ``decided`` (decisions taken with ``unsent=deferrable(request)``) once the reply has left."""
    if decided and deferrable(request):
        after_reply(request, functools.partial(decisions.acknowledge, list(decided)))


class AfterReply:
    """ASGI middleware: runs each request's ``after_reply`` callbacks once its whole body was handed to the server."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        callbacks: list = []

        async def sending(message):
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                while callbacks:
                    callback = callbacks.pop(0)
                    try:
                        await sync_to_async(callback)()
                    except Exception:  # the reply is out; a failed acknowledgement is settled by the sweep
                        logger.exception("work after the reply failed")

        await self.app({**scope, SCOPE_KEY: callbacks}, receive, sending)
