"""What a refused answer allows: whether its agent may already have acted on it, and who may settle it."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q

from ..models import Event, Interrupt, Run
from . import eligibility

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


def settleable_by(user, refused_runs: list[Run]) -> list[Run]:
    """The refused runs ``user`` may settle, in order: staff any, others those whose whole batch they may decide.

    Two queries for any number (``hub.refused.refuse_unless_may_settle`` says why not, one run at a time).
    """
    if user.is_staff:
        return list(refused_runs)
    parents = {run.parent_id: run.pk for run in refused_runs}
    # The policies in force now, not the one stored on each interrupt: that is
    # kept current for pending interrupts only, and these were decided.
    batch = list(Interrupt.objects.filter(run_id__in=list(parents)).select_related("run"))
    rules = eligibility.rules_held(batch)
    barred = {parents[i.run_id] for i in batch if not eligibility.may_decide(user, rules[i.pk], i)}
    return [run for run in refused_runs if run.pk not in barred]
