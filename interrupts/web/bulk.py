"""Bulk decisions from the inbox: one action on the cards ticked, or on every card the inbox's filter matches.

Why it is shaped so: docs/internals/protocol.md (web/bulk.py).
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from ..conf import BULK_ACTIONS, MAX_BULK_DECISIONS, MAX_COMMENT_CHARS
from ..hub import decisions, replies
from ..protocol.errors import ProtocolError
from ..reads import selectors
from ..reads.history import request_label
from ..rules.words import outcome_words
from .navigation import htmx_or_redirect

# Ids are 64-bit: a larger number is no interrupt, and the database refuses to compare with it.
_LARGEST_ID = 2**63 - 1


class CardIdsField(forms.Field):
    """The ticked cards: each an interrupt's id, at most ``MAX_BULK_DECISIONS`` of them."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[int]:
        values = list(value or [])
        if len(values) > MAX_BULK_DECISIONS:
            raise forms.ValidationError(
                f"One bulk decision takes at most {MAX_BULK_DECISIONS:,} cards; {len(values):,} were selected. "
                "Select fewer, or use \"select all matching this filter\" (it takes the first "
                f"{MAX_BULK_DECISIONS:,} and says how many are left).")
        ids = []
        for text in values:
            try:
                number = int(text)
            except (TypeError, ValueError):
                raise forms.ValidationError(f"{str(text)[:40]!r} is not a card's id.") from None
            if not 1 <= number <= _LARGEST_ID:
                raise forms.ValidationError(f"{number} is not a card's id.")
            ids.append(number)
        return ids


class BulkForm(forms.Form):
    action = forms.ChoiceField(choices=[(a, a) for a in BULK_ACTIONS], error_messages={
        "required": "Pick what to do with the selected cards: approve, reject or cancel.",
        "invalid_choice": "A bulk decision is approve, reject or cancel, not %(value)s: "
                          "answers of their own (edits, forms) are given card by card.",
    })
    ids = CardIdsField(required=False)
    # Every pending card matching the page's filter (up to MAX_BULK_DECISIONS), whatever is ticked.
    everything = forms.BooleanField(required=False)
    comment = forms.CharField(required=False, max_length=MAX_COMMENT_CHARS)
    # Decide cards a colleague has claimed too; otherwise each is skipped (CLAIMED), as one decision would ask.
    confirm_claim = forms.BooleanField(required=False)

    def clean(self):
        cleaned = super().clean()
        if not self.errors and not cleaned.get("everything") and not cleaned.get("ids"):
            raise forms.ValidationError("Select at least one card, or all matching this filter, first.")
        return cleaned

    def problem(self) -> str:
        """What is wrong with the form, in one sentence a person can act on."""
        return " ".join(message for errors in self.errors.values() for message in errors)


@require_POST
def bulk_decide(request):
    """Approve, reject or cancel the selected cards (or all matching the filter) in one action."""
    form = BulkForm(request.POST)
    if not form.is_valid():
        return _answer(request, {"error": form.problem()}, status=400)
    data = form.cleaned_data
    targets = selectors.bulk_targets(
        ids=None if data["everything"] else data["ids"], filters=selectors.InboxFilters.from_query(request.GET),
        user=request.user, in_force=selectors.policies_in_force(request))
    try:
        done = decisions.decide_many(targets.chosen, request.user, data["action"], data["comment"],
                                     claim_confirmed=data["confirm_claim"], unsent=replies.deferrable(request))
        replies.acknowledge_after(request, done.decided)
    except ProtocolError as refused:  # what the service refuses whole (INVALID_ACTION, TOO_LARGE)
        return _answer(request, {"error": refused.message}, status=400)
    skipped = [{"interrupt_id": interrupt.interrupt_id, "agent": interrupt.run.agent.name, "code": problem.code,
                "detail": problem.message} for interrupt, problem in done.skipped]
    skipped += [{"interrupt_id": f"#{pk}", "agent": "", "code": "NOT_FOUND",
                 "detail": f"No interrupt {pk}: it was removed."} for pk in targets.missing]
    # In words for the reader (the API's summary names codes): each skipped card is listed with why.
    summary = f"{len(done.decided)} {done.verb}" + (f", {len(skipped)} skipped" if skipped else "")
    # The receipt: each request decided, in words, with one Undo for them all while their batches are unsent.
    chosen = {interrupt.pk: interrupt for interrupt in targets.chosen}
    receipt = [{"pk": d.interrupt_id, "agent": chosen[d.interrupt_id].run.agent.name,
                "what": request_label(chosen[d.interrupt_id].message, chosen[d.interrupt_id].tool_name),
                "outcome": outcome_words(d)} for d in done.decided]
    return _answer(request, {"summary": summary, "decided": len(done.decided), "skipped": skipped, "receipt": receipt,
                             "more": _more_left(targets.more) if targets.more else ""})


class UndoForm(forms.Form):
    ids = CardIdsField()


@require_POST
def bulk_undo(request):
    """Undo the reader's decisions on the cards a bulk decision's receipt lists (those still unsent)."""
    form = UndoForm(request.POST)
    if not form.is_valid():
        return _answer(request, {"error": " ".join(m for errors in form.errors.values() for m in errors)}, status=400)
    undone, refused = decisions.undo_many(selectors.interrupts_by_pk(form.cleaned_data["ids"]), request.user)
    summary = f"{len(undone)} undone: {'they wait' if len(undone) != 1 else 'it waits'} for a decision again"
    if not undone:
        summary = "Nothing undone"
    skipped = [{"interrupt_id": interrupt.interrupt_id, "agent": interrupt.run.agent.name, "code": problem.code,
                "detail": problem.message} for interrupt, problem in refused]
    return _answer(request, {"summary": summary, "skipped": skipped, "receipt": [], "more": "", "undone": True})


def _answer(request, result: dict, status: int = 200):
    if "error" in result:
        notes = [(messages.error, result["error"])]
    else:
        notes = [(messages.success, result["summary"])]
        notes += [(messages.warning, f"Skipped {item['interrupt_id']}: {item['detail']}") for item in result["skipped"]]
        if result["more"]:
            notes.append((messages.info, result["more"]))
    # Back to the inbox as it was filtered: the form's query string is the page's.
    query = request.GET.urlencode()
    return htmx_or_redirect(request, lambda: render(request, "interrupts/_bulk_result.html", result, status=status),
                            reverse("inbox") + (f"?{query}" if query else ""), *notes)


def _more_left(count: int) -> str:
    return (f"{count:,} more matching this filter were left (one bulk decision takes at most "
            f"{MAX_BULK_DECISIONS:,}): do it again for the next ones.")
