"""Two threads telling inbox pages about one card hand their messages on in the order they read it.

A claim committed while a page's presence was being told: the presence's message read the card
before the claim, and reached the loop after the claim's, so the claimer's page heard "nobody
reviews it" last and showed its Release button under an empty claim line (a CI failure of
tests/browser/test_answer_forms.py). In process, with the layer's send replaced by a recorder.
"""

import threading

import pytest

from interrupts.live import relay


class Watched:
    """The relay's lock, saying when a second thread is waiting for it."""

    def __init__(self, lock) -> None:
        self.lock, self.waiting = lock, threading.Event()
        self.holder: int | None = None

    def __enter__(self):
        if self.holder is not None and self.holder != threading.get_ident():
            self.waiting.set()
        self.lock.acquire()
        self.holder = threading.get_ident()

    def __exit__(self, *exc):
        self.holder = None
        self.lock.release()


@pytest.mark.django_db(transaction=True)
def test_the_message_read_later_is_handed_on_later(monkeypatch):
    sent = []
    monkeypatch.setattr(relay, "_send", lambda group, message: sent.append(message["claim"]))
    watched = Watched(relay._telling_attention)
    monkeypatch.setattr(relay, "_telling_attention", watched)
    read_first = threading.Event()

    def before_the_claim(pk):
        read_first.set()
        # The claim's thread now commits and tells: it must wait for this message to be handed on.
        assert watched.waiting.wait(10), "the later reader did not wait for the earlier one's message"
        return {"claim": None, "viewers": []}

    def after_the_claim(pk):
        return {"claim": {"by": "alice"}, "viewers": []}

    presence = threading.Thread(target=relay.attention, args=(7, before_the_claim))
    presence.start()  # outside a transaction: on_commit runs at once
    assert read_first.wait(10)
    claim = threading.Thread(target=relay.attention, args=(7, after_the_claim))
    claim.start()
    presence.join(10)
    claim.join(10)
    assert sent == [None, {"by": "alice"}]
