"""What a refused answer allows: whether its agent may already have acted on it."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q

from ..models import Event

#: The agent's events that say nothing of what it did: a run whose agent sent
#: only these (and failed) did not start acting on the answers, as far as anyone can tell.
_SILENT = ("RUN_STARTED", "RUN_ERROR")


def may_have_acted():
    """An expression for runs (``Run`` rows) whose agent may have acted on what it was sent.

    It sent events past RUN_STARTED (text, tool calls, results, state), or
    the process streaming it stopped mid-run (``WORKER_LOST``: nobody saw
    what happened). Such a refused answer is not sent again (``hub.refused.resend``):
    the agent could act twice. It can still be reopened or closed.
    """
    spoke = Event.objects.filter(run=OuterRef("pk"), from_agent=True).exclude(type__in=_SILENT)
    return Q(Exists(spoke)) | Q(error_code="WORKER_LOST")
