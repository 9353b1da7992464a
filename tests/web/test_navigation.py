"""The one ending of a page action: the fragment for htmx, else a message and a redirect that never leaves the site."""

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from interrupts.models import Run

from .. import factories as make

pytestmark = pytest.mark.django_db


def said(response) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def staff(client):
    user = make.user(reviewer=False, is_staff=True)
    client.force_login(user)
    return user


def test_without_javascript_retry_says_what_happened_and_goes_back_to_next(client, staff):
    waiting = make.run(status=Run.Status.QUEUED, attempts=1)
    response = client.post(reverse("retry-run", args=[waiting.pk]), {"next": "/threads/?q=x"})
    assert response.status_code == 302 and response["Location"] == "/threads/?q=x"
    assert said(response) == [("success", f"Trying {waiting.run_id} again now.")]


def test_a_next_off_the_site_falls_back_and_a_refusal_is_an_error(client, staff):
    ended = make.run(status=Run.Status.SUCCEEDED)
    response = client.post(reverse("retry-run", args=[ended.pk]), {"next": "https://elsewhere.example/"})
    assert response.status_code == 302 and response["Location"] == reverse("inbox")
    assert said(response) == [("error", f"Run {ended.run_id} is no longer waiting for its agent (succeeded).")]


def test_htmx_gets_the_fragment_and_no_message_is_left_for_the_next_page(client, staff):
    waiting = make.run(status=Run.Status.QUEUED, attempts=1)
    response = client.post(reverse("retry-run", args=[waiting.pk]), {"next": "/threads/"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and 'data-testid="retry-said"' in response.content.decode()
    assert f"Trying {waiting.run_id} again now." in response.content.decode()
    assert said(response) == []


def test_settling_answers_the_fragment_or_goes_back_to_its_thread(client, staff):
    plain = make.run(status=Run.Status.SUCCEEDED)
    refusal = f"Run {plain.run_id} is not a resume: it sent no answers."
    fragment = client.post(reverse("settle-close", args=[plain.pk]), HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200 and 'data-testid="refused-said"' in fragment.content.decode()
    assert refusal in fragment.content.decode() and said(fragment) == []
    response = client.post(reverse("settle-close", args=[plain.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("thread", args=[plain.thread.thread_id])
    assert said(response) == [("error", refusal)]
