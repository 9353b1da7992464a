"""A decision link from an email: a confirm page (after login), and the decision when its reader confirms."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache

from ..conf import MAX_COMMENT_CHARS
from ..hub import claims, decisions, links
from ..hub.refusals import Refusal
from ..models import DecisionLink, Interrupt
from ..rules import eligibility

#: What a link's page offers: its own action, or either for an Open link.
OFFERED = {DecisionLink.Action.APPROVE: ("approve",), DecisionLink.Action.REJECT: ("reject",),
           DecisionLink.Action.OPEN: ("approve", "reject")}


@never_cache
def decide_by_link(request, token: str):
    """GET shows what will be decided and changes nothing; POST, from that page, decides and spends the link."""
    now = timezone.now()
    try:
        found = links.find(token, request.user, now)
    except Refusal as refused:
        return _refused(request, refused)
    interrupt = found.interrupt
    offered = OFFERED[found.action]
    rule = eligibility.rule_for(interrupt)
    if why := links.approve_on_card(interrupt, rule):
        # Approving happens on its card (emails mint no Approve link for it): this page may only say no.
        offered = tuple(a for a in offered if a != "approve")
        if not offered:
            return _refused(request, Refusal(
                "PASSKEY_REQUIRED" if rule.require_passkey else "NEEDS_PAYLOAD",
                f"Approving this request happens in your inbox, {why}: open it from there.",
                status=403 if rule.require_passkey else 400))
    if request.method != "POST":
        reviewing = claims.holder(interrupt, now)
        return render(request, "interrupts/decide_link.html", {
            "link": found, "i": interrupt, "offered": offered, "pending": interrupt.status == Interrupt.Status.PENDING,
            "reviewing": reviewing if reviewing is not None and reviewing.pk != request.user.pk else None})
    action, comment = request.POST.get("action"), request.POST.get("comment", "")
    # Checked before the link is spent: a slip here leaves it usable.
    if action not in offered:
        return _refused(request, Refusal("LINK_ACTION", "This link's page offers only "
                                         f"{' or '.join(offered)}: open the request to do anything else.",
                                         status=400))
    if len(comment) > MAX_COMMENT_CHARS:
        return _refused(request, Refusal("TOO_LARGE", f"A comment holds at most {MAX_COMMENT_CHARS:,} characters.",
                                         status=400))
    try:
        links.spend(found, now)
    except Refusal as refused:
        return _refused(request, refused)
    decided = False
    try:
        answer = decisions.answer_for(interrupt, action)
        # As on a card: a colleague's claim is decided over only when the page said so and the reader confirmed.
        decisions.decide(interrupt, request.user, answer.status, answer.payload, action=answer.action,
                         comment=comment, claim_confirmed=request.POST.get("confirm_claim") == "yes")
        decided = True
    except Refusal as refused:
        return _refused(request, refused)
    finally:
        if not decided:  # refused, or a fault (answered 503 by the middleware): the link still works
            links.unspend(found, now)
    messages.success(request, f"{'Approved' if action == 'approve' else 'Rejected'}: "
                              f"{interrupt.message or interrupt.interrupt_id}")
    return redirect(reverse("thread", args=[interrupt.run.thread.thread_id]))


def _refused(request, refused: Refusal):
    return render(request, "interrupts/decide_link.html", {"refused": refused}, status=refused.status)
