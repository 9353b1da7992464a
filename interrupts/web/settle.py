"""Answers the agent refused: send them again, reopen the batch, or close it (``hub.refused``)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from ..hub import refused
from ..models import Run
from ..protocol.errors import ProtocolError
from ..reads import selectors
from .navigation import back_to, htmx_or_redirect

#: What people may do about an answer the agent refused: each button's words.
SETTLE_ACTIONS = (("resend", "Send again"), ("reopen", "Reopen to answer again"), ("close", "Close the batch"))
#: Each way of settling (the ``how`` of its URL): the function that does it, and what the page then says.
_SETTLE = {"resend": (refused.resend, "Sent the answers again as {new}."),
           "reopen": (refused.reopen, "Reopened: the batch waits for new answers."),
           "close": (refused.close, "Closed the batch: the thread takes new input.")}


@require_POST
def settle_run(request, pk: int, how: str):
    """Resend, reopen or close the batch whose answers the agent refused (run ``pk``, the failed resume)."""
    run = get_object_or_404(Run.objects.select_related("thread"), pk=pk)
    settle, done = _SETTLE[how]
    try:
        result = settle(run, request.user)
    except ProtocolError as problem:
        said, ok = problem.message, False
    else:
        said, ok = done.format(new=getattr(result, "run_id", "")), True

    def partial():
        on_thread = bool(request.POST.get("on_thread"))
        return render(request, "interrupts/_refused.html", {
            "refused_answers": selectors.refused_answers(thread=run.thread if on_thread else None, user=request.user),
            "refused_on_thread": on_thread, "refused_said": said, "settle_actions": SETTLE_ACTIONS})

    return htmx_or_redirect(request, partial, back_to(request, reverse("thread", args=[run.thread.thread_id])),
                            (messages.success if ok else messages.error, said))
