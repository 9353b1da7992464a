"""How a decision reads to people, the same on every page, export and notification."""

from __future__ import annotations

from ..models import Decision
from ..protocol.schema.edits import EDITED_ARGS

#: How each action reads once taken, on every page: words, never the wire's ``resolved`` or ``{"approved": false}``.
OUTCOME_WORDS = {"approve": "Approved", "edit": "Approved with edits", "respond": "Answered",
                 "reject": "Rejected", "cancel": "Dismissed"}


def outcome_words(decision: Decision) -> str:
    """What ``decision`` did, in words: "Approved", "Rejected", "Approved with edits", "Answered", "Dismissed"."""
    if decision.action in OUTCOME_WORDS:
        return OUTCOME_WORDS[decision.action]
    # A decision recorded before actions were: read it from the answer, as ``action_of`` does.
    payload = decision.payload if isinstance(decision.payload, dict) else {}
    if decision.status == Decision.Status.CANCELLED:
        return OUTCOME_WORDS["cancel"]
    if payload.get("approved") is False:
        return OUTCOME_WORDS["reject"]
    if payload.get("approved") is True:
        return OUTCOME_WORDS["edit" if EDITED_ARGS in payload else "approve"]
    return OUTCOME_WORDS["respond"]


def decider(decision: Decision) -> str:
    """Who took ``decision``, as a page says it: "Alice Smith", "Alice Smith's standing grant", or
    "policy Deploys, set by Alice Smith"."""
    return deciders(decision.user.get_full_name() or decision.user.get_username(), grant=decision.grant_id,
                    by_policy=decision.by_policy, policy=decision.policy)


def deciders(name: str, *, grant=None, by_policy: bool = False, policy: str = "") -> str:
    """``decider`` from the parts a page read (``name``: the person's full name, else username)."""
    if by_policy:
        return f"policy {policy}, set by {name}"
    return f"{name}'s standing grant" if grant else name
