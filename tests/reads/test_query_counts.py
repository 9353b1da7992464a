"""Every page and API read costs a fixed number of queries, whatever the number of rows.

Each is measured on a world of 3 and of 30 interrupts (threads, runs,
decisions, resumes), with several agents, policies and users: a query per
row would make the two counts differ, and fail here.
"""

import pytest
from django.contrib.auth.models import Group

from interrupts.models import Interrupt
from interrupts.rules import eligibility

from .. import factories as make

pytestmark = pytest.mark.django_db

SIZES = [3, 30]


def world(size: int) -> dict:
    """``size`` pending interrupts over three agents and their policies, ``size`` closed ones, and a reader."""
    finance = Group.objects.create(name="Finance")
    reader, colleague, requester = make.user(is_staff=True), make.user(), make.user()
    finance.user_set.add(reader, colleague)
    agents = [make.agent() for _ in range(3)]
    first = None
    make.policy(agent=agents[0], users=[reader], required_approvals=2)
    make.policy(agent=agents[1], groups=[finance], allow_self_approval=True)
    make.policy(agent=agents[2], reason="tool_call", users=[colleague])
    for n in range(size):
        agent = agents[n % 3]
        run = make.run(make.thread(agent=agent), status="interrupted", requested_by=(requester, reader)[n % 2])
        make.event(run, 1)
        pending = make.interrupt(run, reason=("confirmation", "tool_call")[n % 2], tool_call_id=f"call-{n}",
                                 tool_name="send", proposed_args={"n": n})
        first = first or pending
        if n % 3 == 0:
            make.decision(pending, colleague, payload={"approved": True})
        closed_run = make.run(make.thread(agent=agent), status="interrupted")
        closed = make.interrupt(closed_run, status=Interrupt.Status.RESOLVED)
        make.decision(closed, colleague, payload={"approved": True})
        make.run(closed_run.thread, parent=closed_run, resume_key=f"resume-{n}", status="succeeded")
    # The same rows in every world: only how many others there are differs.
    return {"reader": reader, "thread": first.run.thread, "run": first.run, "interrupt": first, "agent": agents[0],
            "self-approving agent": agents[1]}


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"{n}-rows")
def built(request, django_db_setup, django_db_blocker):
    # Built once per size for the module, in a transaction rolled back after it: each test's own
    # changes roll back to this savepoint. 48 tests each building 30 rows took half a minute.
    with make.kept_for_the_module(django_db_blocker):
        yield world(request.param)


@pytest.fixture
def seen(built, client):
    client.force_login(built["reader"])
    eligibility.held_policies()  # the process's copy of the policies, as a served app holds it
    return client, built


PAGES = {
    # name: (url, queries). The inbox's include one for who has its cards open (presence), one for the
    # grants its tool calls are worth (selectors.grant_suggestions), and the inbox's and the audit's one
    # for the subagents that asked (selectors.subagents).
    "inbox, waiting for me": (lambda w: "/inbox/", 18),
    "inbox, all pending": (lambda w: "/inbox/?scope=all", 19),
    "inbox, filtered": (lambda w: "/inbox/?agent=" + w["self-approving agent"].name + "&reason=tool_call", 19),
    "inbox, page 2": (lambda w: "/inbox/?page=2", 18),
    "threads": (lambda w: "/threads/", 10),
    # With a request pending, its cards as the inbox reads them (seven more: the page, its decisions, runs, claims).
    "thread": (lambda w: f"/threads/{w['thread'].thread_id}/", 21),
    "audit": (lambda w: "/audit/", 26),
    "agents and policies": (lambda w: "/registry/", 12),  # one for each agent's latest resumes; its policies named
    "insight": (lambda w: "/insight/", 10),
    "insight, live figures": (lambda w: "/insight/?part=figures&period=month", 5),
}

API = {
    "interrupts": (lambda w: "/api/interrupts/", 8),
    "interrupts, mine": (lambda w: "/api/interrupts/?scope=mine", 8),
    "interrupts, all": (lambda w: "/api/interrupts/?status=all", 8),
    "interrupt": (lambda w: f"/api/interrupts/{w['interrupt'].pk}/", 7),
    "run": (lambda w: f"/api/runs/{w['run'].run_id}/", 3),
    "threads": (lambda w: "/api/threads/", 4),
    "thread": (lambda w: f"/api/threads/{w['thread'].thread_id}/", 3),
    "events": (lambda w: f"/api/threads/{w['thread'].thread_id}/events/", 4),
    "policies": (lambda w: "/api/policies/", 6),
    "policy": (lambda w: "/api/policies/" + w["agent"].policies.first().name + "/", 6),
    "agents": (lambda w: "/api/agents/", 4),
    "agent": (lambda w: f"/api/agents/{w['agent'].name}/", 3),
    "insight": (lambda w: "/api/insight/?period=day", 5),
}


@pytest.mark.parametrize("name", PAGES)
def test_each_page_reads_a_fixed_number_of_queries(seen, django_assert_num_queries, name):
    client, made = seen
    url, queries = PAGES[name]
    with django_assert_num_queries(queries):
        assert client.get(url(made)).status_code == 200


@pytest.mark.parametrize("name", API)
def test_each_api_read_costs_a_fixed_number_of_queries(seen, django_assert_num_queries, name):
    client, made = seen
    url, queries = API[name]
    with django_assert_num_queries(queries):
        assert client.get(url(made)).status_code == 200
