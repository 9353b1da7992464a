"""The inbox and the header count what waits up to ``INBOX_COUNTED`` and say "1000+" past it: an exact count
read every pending row on every page. Paging on past the bound still works, counted as far as the page asked."""

import pytest
from django.urls import reverse

from interrupts.models import Interrupt
from interrupts.reads import selectors
from interrupts.web import inbox

from .. import factories as make


@pytest.fixture
def small_bounds(monkeypatch):
    """An inbox that counts up to 4, with pages of 2."""
    monkeypatch.setattr(selectors, "INBOX_COUNTED", 4)
    monkeypatch.setattr(inbox, "INBOX_COUNTED", 4)
    monkeypatch.setattr(inbox, "INBOX_PAGE_SIZE", 2)


@pytest.fixture
def reviewer(client, db):
    user = make.user()
    client.force_login(user)
    return user


def waiting(n: int) -> list[Interrupt]:
    return [make.interrupt(message=f"Step {k}") for k in range(n)]


def shown_count(page: str) -> str:
    return page.split('data-testid="inbox-count">', 1)[1].split("<", 1)[0]


def test_counted_reads_one_past_its_bound(reviewer):
    waiting(3)
    pending = Interrupt.objects.filter(status=Interrupt.Status.PENDING)
    assert selectors.counted(pending, 3) == selectors.Counted(3, more=False)
    found = selectors.counted(pending, 2)
    assert found == selectors.Counted(2, more=True) and str(found) == "2+"
    assert str(selectors.counted(pending.none(), 2)) == "0" and not selectors.counted(pending.none(), 2)


def test_the_badge_the_list_and_the_bulk_box_say_past_the_bound(client, reviewer, small_bounds):
    waiting(7)
    page = client.get(reverse("inbox")).content.decode()
    assert shown_count(page) == "4+" and 'id="pending-badge"' in page
    badge = page.split('id="pending-badge"', 1)[1].split("</span>", 1)[0]
    assert badge.endswith(">4+") and 'aria-label="4+ waiting for you"' in badge
    assert "<title>(4+) " in page
    # No page total it has not counted; the next page is offered.
    assert "page 1 of" not in page and "page=2" in page
    assert "Select all <span data-bulk-total>4+</span> matching this filter" in page


def test_under_the_bound_the_count_is_exact(client, reviewer, small_bounds):
    waiting(3)
    page = client.get(reverse("inbox")).content.decode()
    assert shown_count(page) == "3" and "page 1 of 2" in page and "<title>(3) " in page


def test_a_page_past_the_bound_is_counted_as_far_as_it_asks(client, reviewer, small_bounds):
    made = waiting(7)
    # Page 3 holds rows 5 and 6: past the bound, yet it is served, with a next page (row 7) after it.
    page = client.get(reverse("inbox"), {"page": 3}).content.decode()
    assert f'id="interrupt-{made[4].pk}"' in page and f'id="interrupt-{made[5].pk}"' in page
    assert shown_count(page) == "6+" and "page=4" in page
    last = client.get(reverse("inbox"), {"page": 4}).content.decode()
    assert f'id="interrupt-{made[6].pk}"' in last and shown_count(last) == "7" and "page 4 of 4" in last
    # The header keeps to the bound whatever the page.
    assert "<title>(4+) " in last


def test_a_filtered_list_is_counted_the_same_way(client, reviewer, small_bounds):
    agent = make.agent()
    for _ in range(6):
        make.interrupt(make.run(make.thread(agent=agent)))
    waiting(1)
    page = client.get(reverse("inbox"), {"agent": agent.name}).content.decode()
    assert shown_count(page) == "4+"


@pytest.mark.parametrize("asked", ["0", "-3", "two", "9" * 40, "1" * 5000])
def test_any_page_number_is_answered_with_a_page(client, reviewer, small_bounds, asked):
    made = waiting(3)
    page = client.get(reverse("inbox"), {"page": asked})
    assert page.status_code == 200
    # Past the end (or not a number) is the paginator's: the first page, or the last.
    shown = page.content.decode()
    assert f'id="interrupt-{made[0].pk}"' in shown or f'id="interrupt-{made[2].pk}"' in shown
