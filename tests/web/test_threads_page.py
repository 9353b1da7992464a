"""Starting a thread or a run from the pages: what is refused, and how the page says so."""

import pytest
from django.urls import reverse

from interrupts.models import Run, Thread

from .. import factories as make

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviewer(client):
    user = make.user(first_name="Rita")
    client.force_login(user)
    return user


@pytest.mark.parametrize("message", ["", "   \n  "])
def test_an_empty_message_starts_no_thread_and_says_so_beside_the_field(client, reviewer, message):
    agent = make.agent(name="outreach")
    response = client.post(reverse("start-thread"), {"agent": agent.name, "message": message})
    assert response.status_code == 400
    page = response.content.decode()
    assert '<ul class="errorlist" id="id_message_error"><li>Write a message for the agent.</li></ul>' in page
    assert 'aria-invalid="true" aria-describedby="id_message_error"' in page
    assert '<option value="outreach" selected>' in page  # what was chosen stays chosen
    assert not Thread.objects.exists() and not Run.objects.exists()


def test_an_agent_that_is_gone_is_refused_beside_its_field(client, reviewer):
    make.agent(name="outreach")
    response = client.post(reverse("start-thread"), {"agent": "retired", "message": "Email a@b.com"})
    assert response.status_code == 400
    assert "That agent is no longer registered: pick another." in response.content.decode()
    assert not Thread.objects.exists()


def test_an_empty_message_on_a_thread_starts_no_run_and_keeps_the_thread_page(client, reviewer):
    run = make.run(status="succeeded")
    response = client.post(reverse("start-run", args=[run.thread.thread_id]), {"message": " "})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Write a message for the agent." in page and 'id="history"' in page
    assert Run.objects.filter(thread=run.thread).count() == 1


def test_a_message_starts_the_thread_and_its_text_reaches_the_run(client, reviewer):
    agent = make.agent(name="outreach")
    response = client.post(reverse("start-thread"), {"agent": agent.name, "message": "  Email c@d.com  "})
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("thread", args=[run.thread.thread_id])
    assert run.input["messages"][-1]["content"] == "Email c@d.com"


def test_the_agent_menu_says_what_each_agent_does_and_preselects_none(client, reviewer):
    make.agent(name="outreach", description="Drafts the email your message asks for.")
    make.agent(name="archivist", description="Files " + "very " * 40 + "old tickets.")
    page = client.get(reverse("threads")).content.decode()
    assert '<option value="" selected>Choose an agent…</option>' in page
    assert '<option value="outreach">outreach: Drafts the email your message asks for.</option>' in page
    long = page.split('<option value="archivist">', 1)[1].split("</option>", 1)[0]
    assert long.startswith("archivist: Files very") and long.endswith("…") and len(long) < 110
    refused = client.post(reverse("start-thread"), {"agent": "", "message": "Email c@d.com"})
    assert refused.status_code == 400
    assert "Choose the agent to start a thread with." in refused.content.decode()
    assert not Thread.objects.exists()
