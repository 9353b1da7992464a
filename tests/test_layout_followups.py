"""Issue 15's follow-ups: one set of outcome words on every page, reasons in words on the insight page,
forms labelled in words, and a JSON tree that counts its keys in English."""

import pytest
from django.utils import timezone

from interrupts.hub import decisions
from interrupts.reads import selectors

from . import factories as make


# --- one definition of a decision's words -----------------------------------------------------------------


EDITED = {"approved": True, "editedArgs": {"to": "c"}}
DECIDED = [
    ("approve", {"payload": {"approved": True}}), ("reject", {"payload": {"approved": False}}),
    ("edit", {"payload": EDITED, "edited_args": {"to": "c"}}), ("respond", {"payload": {"year": 2026}}),
    ("cancel", {"status": "cancelled"}),
    # Decisions from before `action` was recorded, read from the answer.
    ("", {"payload": {"approved": False}}), ("", {"payload": {"approved": True}}),
    ("", {"payload": EDITED, "edited_args": {"to": "c"}}), ("", {"payload": {"note": "hi"}}),
    ("", {"status": "cancelled"}),
    # A form whose schema has an `approved` field among others: the audit used to read it its own way.
    ("", {"payload": {"approved": True, "note": "ship it"}}),
]


@pytest.mark.django_db
@pytest.mark.parametrize("action, decided", DECIDED)
def test_the_audit_says_what_the_inbox_and_thread_page_say(action, decided):
    status = decided.get("status", "resolved")
    interrupt = make.interrupt(status="cancelled" if status == "cancelled" else "resolved", closed_at=timezone.now())
    decision = make.decision(interrupt, make.user(), status=status, action=action,
                             payload=decided.get("payload"), edited_args=decided.get("edited_args"))
    [row] = selectors.audit_rows([interrupt])
    assert row.outcome == decisions.outcome_words(decision)


def test_the_words_are_defined_once():
    assert not hasattr(selectors, "OUTCOME_WORDS")
