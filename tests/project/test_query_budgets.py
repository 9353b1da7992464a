"""What each page and API read costs the database: the same statements whatever the number of rows, and exactly
its budget, on both back ends.

A page that grows a query per row fails here, and so does a change that adds a statement to a read: a
change that needs one more raises that page's figure below, in the same commit, saying why.
"""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from interrupts.hub import decisions, grants
from interrupts.models import Event, Grant, Interrupt, Policy, Run, Thread

from .. import factories as make

pytestmark = pytest.mark.django_db

#: Statements for one request, after one like it (the process's caches, as a served app has them). A page
#: judging by the policies asks whether the process's copy still holds (one statement), not for all of them.
BUDGETS = {
    "/inbox/": 15,
    "/inbox/?scope=all": 16,
    "/threads/": 8,
    "/threads/{thread}/": 18,
    "/threads/{thread}/audit/": 17,
    "/audit/": 16,
    "/insight/": 8,
    "/registry/": 10,  # its policies with their agents, to name them (policies_overview)
    "/webhooks/": 8,
    "/webhooks/deliveries/": 7,
    "/settings/notifications/": 5,
    "/api/agents/": 4,
    "/api/threads/": 4,
    "/api/threads/{thread}/": 3,
    "/api/interrupts/": 5,
    "/api/interrupts/{interrupt}/": 5,
    "/api/policies/": 6,
    "/api/webhooks/": 3,
    "/api/runs/{run}/": 3,
    "/api/deliveries/": 3,
    "/api/me/notifications/": 3,
    "/api/insight/": 5,
    "/inbox/?agent={agent}": 16,
    "/inbox/?thread={thread}&embedded=1": 11,
    "/threads/{thread}/events/": 9,
    "/insight/export.csv": 5,
    "/insight/export.json": 5,
    "/registry/add/": 5,
    "/registry/{agent}/edit/": 6,
    "/policies/add/": 9,
    "/policies/{policy_pk}/edit/": 12,
    "/api/agents/{agent}/": 3,
    "/api/threads/{thread}/events/": 4,
    "/api/policies/{policy}/": 5,
    "/api/metrics/": 7,
    "/metrics": 7,
    "/grants/": 7,
    "/api/grants/": 4,
    "/api/grants/{grant}/": 3,
}


def grow(reviewer, count: int, first: Thread | None = None) -> None:
    """``count`` more agents, each with a thread holding a pending request, a decided one and a failed run;
    ``first`` gets as many more runs of each kind."""
    for n in range(count):
        agent = make.agent()
        make.policy(agent=agent, name=f"policy of {agent.name}", allow_self_approval=True)
        grants.create(reviewer, agent=agent, tool_name="deploy", args_schema={}, why="routine", hours=1)
        for thread in filter(None, [make.thread(agent=agent, title=f"Thread {n}"), first]):
            paused = make.run(thread, status="interrupted", requested_by=reviewer)
            seq = Event.objects.filter(thread=thread).count()
            make.event(paused, seq + 1)
            make.event(paused, seq + 2, type="RUN_FINISHED")
            make.interrupt(paused, reason=f"reason-{n % 3}")
            decided = make.interrupt(make.run(thread, status="interrupted"))
            decisions.decide(decided, reviewer, "resolved", payload={"approved": True}, action="approve")
            make.run(thread, status="failed", error_code="AGENT_UNREACHABLE")


@pytest.fixture
def reviewer(client):
    user = make.user(username="reviewer", is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


def judge(few: list[str], many: list[str], budget: int, what: str) -> None:
    said = "\n".join(sql[:160] for sql in many)
    assert len(many) == len(few), f"{what}: {len(few)} statements with 2 of each row, {len(many)} with 8:\n{said}"
    assert len(many) == budget, f"{what} took {len(many)} statements, its budget is {budget}:\n{said}"


def cost(client, url: str) -> list[str]:
    """The statements of a request for ``url``, made after one like it (the process's caches, as served)."""
    assert client.get(url).status_code == 200
    with CaptureQueriesContext(connection) as statements:
        response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return [statement["sql"] for statement in statements]


@pytest.fixture(scope="module")
def measured(django_db_setup, django_db_blocker):
    """Each read's URL and its statements with 2 of each row; the world then grown to 8 of each. Built once,
    in a transaction rolled back after the module: 39 tests each growing their own took 48 s on PostgreSQL."""
    with make.kept_for_the_module(django_db_blocker):
        reviewer = make.user(username="reader", is_staff=True, is_superuser=True)
        client = Client()
        client.force_login(reviewer)
        grow(reviewer, 2)
        first = Interrupt.objects.filter(status="pending").order_by("pk").select_related("run__thread").first()
        policy = first.policy or Policy.objects.get(agent=first.run.agent)
        urls = {path: path.format(thread=first.run.thread.thread_id, interrupt=first.pk, run=first.run.run_id,
                                  agent=first.run.agent.name, policy=policy.name, policy_pk=policy.pk,
                                  grant=Grant.objects.order_by("pk").first().pk) for path in BUDGETS}
        few = {path: cost(client, url) for path, url in urls.items()}
        grow(reviewer, 6, first=first.run.thread)
        yield client, urls, few


@pytest.mark.parametrize("path", BUDGETS)
def test_a_read_costs_its_budget_whatever_the_rows(measured, path):
    client, urls, few = measured
    judge(few[path], cost(client, urls[path]), BUDGETS[path], path)


#: One approval from the inbox (htmx), answered with its batch's new rendering, on each back end: PostgreSQL
#: adds the batch's row lock and the trail's advisory lock (tests/hub/test_decide_cost.py has the API's).
DECISION_FROM_THE_INBOX = {"sqlite": 26, "postgresql": 28}


def test_a_decision_from_the_inbox_costs_its_budget_whatever_the_rows(client, reviewer):
    def cost() -> list[str]:
        pending = Interrupt.objects.filter(status="pending").order_by("-pk")[:2]
        for interrupt in pending:  # the first warms the process's caches
            with CaptureQueriesContext(connection) as statements:
                response = client.post(reverse("decide", args=[interrupt.pk]), {"action": "approve"},
                                       HTTP_HX_REQUEST="true", HTTP_HX_TARGET=f"batch-{interrupt.run_id}")
            assert response.status_code == 200, response.content[:300]
        assert Interrupt.objects.get(pk=interrupt.pk).status == "resolved"
        return [statement["sql"] for statement in statements]

    grow(reviewer, 2)
    few = cost()
    grow(reviewer, 6)
    judge(few, cost(), DECISION_FROM_THE_INBOX[connection.vendor], "the decision")


#: A bulk approval through the API: what the request costs whatever its size, and what each card adds (its
#: own decision, as if alone: re-read, checked, recorded in the trail, its batch's resume queued). PostgreSQL
#: adds each card's batch row lock and the trail's advisory lock.
BULK_DECISION = {"sqlite": (4, 17), "postgresql": (4, 19)}


def test_a_bulk_decision_costs_a_fixed_amount_per_card(client, reviewer):
    grow(reviewer, 12)

    def cost(size: int) -> int:
        chosen = list(Interrupt.objects.filter(status="pending").order_by("pk").values_list("pk", flat=True)[:size])
        with CaptureQueriesContext(connection) as statements:
            response = client.post("/api/interrupts/bulk-decide/", {"action": "approve", "ids": chosen},
                                   content_type="application/json")
        assert response.status_code == 200 and len(response.json()["decided"]) == size, response.content[:300]
        return len(statements)

    cost(1)  # the process's caches, as a served app has them
    two, six = cost(2), cost(6)
    per_card = (six - two) // 4
    assert (two - 2 * per_card, per_card) == BULK_DECISION[connection.vendor], (two, six)
    assert six - two == 4 * per_card


def test_a_run_is_read_by_its_run_id_index_without_its_thread_s_conversation(client, reviewer):
    thread = make.thread(messages=[{"id": "m1", "role": "user", "content": "a long conversation"}])
    run = make.run(thread, status="interrupted", requested_by=reviewer)
    make.run(thread, parent=run, status="succeeded")
    [read] = [sql for sql in cost(client, f"/api/runs/{run.run_id}/") if 'FROM "interrupts_run"' in sql]
    # Names only: the conversation is the thread page's to read, and a long one was decoded on every run read.
    selected = read.split('FROM "interrupts_run" INNER JOIN')[0]  # not the subquery's FROM
    assert '"messages"' not in selected and '"state"' not in selected
    assert selected.count('"input"') == 1  # the run's own, not its parent's
    if connection.vendor == "sqlite":  # the captured statement has its values in place, as EXPLAIN needs
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN QUERY PLAN " + read)
            plan = " ".join(str(row[-1]) for row in cursor.fetchall())
        assert "run_run_id" in plan and "SCAN interrupts_run" not in plan, plan


def _waiting_in_a_conversation(reviewer) -> Interrupt:
    """A pending interrupt the reviewer may approve, its thread and run holding some of a conversation."""
    thread = make.thread(messages=[{"id": "m1", "role": "user", "content": "a long conversation"}], state={"k": 1})
    run = make.run(thread, status="interrupted", requested_by=reviewer,
                   input={"threadId": thread.thread_id, "runId": "r", "messages": [], "state": {}})
    interrupt = make.interrupt(run)
    make.policy(agent=thread.agent, allow_self_approval=True)
    return interrupt


@pytest.mark.parametrize("path", ["/inbox/", "/inbox/?scope=all", "/interrupts/{interrupt}/undo/"])
def test_the_inbox_reads_no_batch_s_conversation(client, reviewer, path):
    # Cards name their thread and agent; the conversation is the thread page's. Read with every card, a long
    # one was decoded whole for each batch on every page, each time a card was opened, and for its resume.
    interrupt = _waiting_in_a_conversation(reviewer)
    url = path.format(interrupt=interrupt.pk)
    statements = cost(client, url) if "undo" not in url else _opened(client, url)
    read = " ".join(sql.split(" FROM ")[0] for sql in statements)
    assert '"interrupts_thread"."messages"' not in read and '"interrupts_thread"."state"' not in read
    assert '"interrupts_run"."input"' not in read and '"interrupts_run"."outcome"' not in read


@pytest.mark.parametrize("door", ["api", "inbox"])
def test_a_decision_reads_the_thread_s_conversation_once_and_no_run_s(client, reviewer, door):
    # The resume carries the thread's messages and state: read once, under the batch's lock. The interrupted
    # run's own input and outcome go nowhere; each read of them decoded a long conversation again.
    interrupt = _waiting_in_a_conversation(reviewer)
    with CaptureQueriesContext(connection) as statements:
        if door == "api":
            response = client.post(f"/api/interrupts/{interrupt.pk}/decide/", {"action": "approve"},
                                   content_type="application/json")
        else:
            response = client.post(reverse("decide", args=[interrupt.pk]), {"action": "approve"},
                                   HTTP_HX_REQUEST="true", HTTP_HX_TARGET=f"batch-{interrupt.run_id}")
    assert response.status_code in (200, 201), response.content[:300]
    assert Run.objects.filter(parent=interrupt.run_id, resume_key__isnull=False).exists()  # the resume was queued
    selected = [sql.split(" FROM ")[0] for sql in (q["sql"] for q in statements) if sql.startswith("SELECT")]
    assert sum('"interrupts_thread"."messages"' in sql for sql in selected) == 1
    assert not any('"interrupts_run"."input"' in sql or '"interrupts_run"."outcome"' in sql for sql in selected)


def _opened(client, url: str) -> list[str]:
    """One card opened as the page opens it (htmx)."""
    assert client.get(url, HTTP_HX_REQUEST="true").status_code == 200
    with CaptureQueriesContext(connection) as statements:
        assert client.get(url, HTTP_HX_REQUEST="true").status_code == 200
    return [statement["sql"] for statement in statements]


#: One card opened as the page opens it (htmx), by a superuser (no permission queries): session and user,
#: the card's whole batch with it (one read), the members' live decisions and subagents, the policies'
#: version, the batch's resume, who else is looking at it.
OPENED = 8


def test_a_card_opened_costs_its_budget_whatever_its_batch(client, reviewer):
    interrupt = _waiting_in_a_conversation(reviewer)
    url = f"/interrupts/{interrupt.pk}/undo/"
    alone = _opened(client, url)
    for n in range(3):
        make.interrupt(interrupt.run, interrupt_id=f"more-{n}")
    assert len(alone) <= OPENED, "\n".join(sql[:150] for sql in alone)
    assert len(_opened(client, url)) == len(alone)
    assert client.get("/interrupts/999999/undo/", HTTP_HX_REQUEST="true").status_code == 404
