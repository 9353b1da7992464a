"""One request at a time (the inbox's default view): the first card whole, the others folded to their titles
until opened; a reader who stacks every card gets every card whole, and a batch read for an opened card is whole."""

import re

import pytest
from django.urls import reverse

from .. import factories as make


@pytest.fixture
def reviewer(client, db):
    user = make.user(first_name="Rita")
    client.force_login(user)
    return user


def cards(page: str) -> dict[str, str]:
    """Each card of a page by its interrupt's pk: its markup."""
    return {m.group(1): m.group(0) for m in re.finditer(r'<article[^>]*id="interrupt-(\d+)".*?</article>', page, re.S)}


@pytest.fixture
def three(reviewer):
    """Three requests, each from a run of its own: three batches, oldest first."""
    return [make.interrupt(message=f"Step {n}: go ahead?") for n in range(3)]


def test_the_first_card_is_whole_and_the_others_are_folded_titles(client, three):
    page = client.get(reverse("inbox")).content.decode()
    shown = cards(page)
    first, *others = (str(i.pk) for i in three)
    assert list(shown) == [first, *others]
    assert "data-folded" not in shown[first] and reverse("decide", args=[three[0].pk]) in shown[first]
    for pk, interrupt in zip(others, three[1:], strict=True):
        folded = shown[pk]
        assert "data-folded" in folded and interrupt.message in folded
        # Titles only: nothing to decide or claim until it is read whole, but it can be ticked for a bulk decision.
        assert reverse("decide", args=[interrupt.pk]) not in folded and "claim-button" not in folded
        assert f'value="{interrupt.pk}" form="bulk" data-bulk-pick' in folded
        # Without scripts, its thread's page shows it whole.
        assert f'href="/threads/{interrupt.run.thread.thread_id}/#interrupt-{pk}"' in folded
    # The triage list lists every request, folded or not; the batches say which are folded.
    assert len(re.findall(r'data-testid="row"', page)) == 3
    assert len(re.findall(r'<section class="batch"[^>]*data-folded>', page)) == 2


def test_a_reader_who_stacks_every_card_gets_every_card_whole(client, three):
    make.every_card_whole(client)
    page = client.get(reverse("inbox")).content.decode()
    shown = cards(page)
    assert len(shown) == 3 and not any("data-folded" in card for card in shown.values())
    assert all(reverse("decide", args=[i.pk]) in shown[str(i.pk)] for i in three)


def test_an_opened_card_s_batch_is_read_whole(client, three):
    folded = three[2]
    read = client.get(reverse("undo", args=[folded.pk]), HTTP_HX_REQUEST="true").content.decode()
    [card] = cards(read).values()
    assert "data-folded" not in card and reverse("decide", args=[folded.pk]) in card


def test_the_thread_page_never_folds(client, three):
    thread = three[2].run.thread
    listed = client.get(reverse("inbox"), {"thread": thread.thread_id, "embedded": "1"}).content.decode()
    [card] = cards(listed).values()
    assert "data-folded" not in card


def test_a_folded_card_shows_the_agent_s_words_as_text(client, reviewer):
    make.interrupt(message="First: go ahead?")
    hostile = make.interrupt(message="<script>alert('m')</script>", reason="acme:<img src=x onerror=alert(1)>")
    folded = cards(client.get(reverse("inbox")).content.decode())[str(hostile.pk)]
    assert "data-folded" in folded
    assert "<script>" not in folded and "<img" not in folded
    assert "&lt;script&gt;alert(&#x27;m&#x27;)&lt;/script&gt;" in folded


def test_someone_who_may_not_decide_sees_folded_titles_without_a_bulk_box(client, db):
    client.force_login(make.user(reviewer=False))
    pending = [make.interrupt(message=f"Step {n}: go ahead?") for n in range(2)]
    shown = cards(client.get(reverse("inbox"), {"scope": "all"}).content.decode())
    folded = shown[str(pending[1].pk)]
    assert "data-folded" in folded and "data-bulk-pick" not in folded
