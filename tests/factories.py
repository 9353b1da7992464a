"""Small builders for rows the tests need; each writes through the ORM, or the action that owns the change."""

import contextlib
import itertools

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import TestCase

from interrupts.conf import INBOX_VIEW_COOKIE
from interrupts.hub import agents, policies, tokens
from interrupts.models import Agent, Decision, Event, Interrupt, Policy, Run, Thread

_counter = itertools.count(1)


def agent(**fields) -> Agent:
    n = next(_counter)
    fields.setdefault("name", f"agent-{n}")
    fields.setdefault("url", f"http://127.0.0.1:9/agents/{n}/")
    return agents.save(Agent(**fields))


def thread(**fields) -> Thread:
    fields.setdefault("thread_id", f"thread-{next(_counter)}")
    if "agent" not in fields:
        fields["agent"] = agent()
    return Thread.objects.create(**fields)


def run(thread_obj=None, **fields) -> Run:
    thread_obj = thread_obj or thread()
    fields.setdefault("run_id", f"run-{next(_counter)}")
    fields.setdefault("agent", thread_obj.agent)
    fields.setdefault(
        "input", {"threadId": thread_obj.thread_id, "runId": fields["run_id"], "messages": []}
    )
    return Run.objects.create(thread=thread_obj, **fields)


def event(run_obj, seq, type="RUN_STARTED", **fields) -> Event:
    fields.setdefault(
        "payload", {"type": type, "threadId": run_obj.thread.thread_id, "runId": run_obj.run_id}
    )
    return Event.objects.create(thread=run_obj.thread, run=run_obj, seq=seq, type=type, **fields)


def interrupt(run_obj=None, **fields) -> Interrupt:
    run_obj = run_obj or run()
    fields.setdefault("interrupt_id", f"int-{next(_counter)}")
    fields.setdefault("reason", "confirmation")
    fields.setdefault("raw", {"id": fields["interrupt_id"], "reason": fields["reason"]})
    made = Interrupt(run=run_obj, run_agent_id=run_obj.agent_id, **fields)
    policies.assign([made], run_obj.agent_id)  # as recording does when an agent raises it
    made.save()
    return made


def user(reviewer: bool = True, **fields):
    """A user; by default one of the Reviewers (holding ``interrupts.decide_interrupt``)."""
    fields.setdefault("username", f"user-{next(_counter)}")
    made = get_user_model().objects.create_user(password="pw-for-tests-only", **fields)
    if reviewer:
        made.groups.add(Group.objects.get(name="Reviewers"))
    return made


def token(user_obj, **options) -> str:
    """A new API token for ``user_obj`` (the only time it exists in full)."""
    return tokens.issue(user_obj, **options)[1]


def every_card_whole(client) -> None:
    """The inbox as a reader who stacks every card sees it: each card whole, none folded to its title."""
    client.cookies[INBOX_VIEW_COOKIE] = "all"


def policy(**fields) -> Policy:
    groups, users = fields.pop("groups", []), fields.pop("users", [])
    fields.setdefault("name", f"policy-{next(_counter)}")
    return policies.save(Policy(**fields), groups=groups, users=users)


def decision(interrupt_obj, user_obj, status="resolved", **fields) -> Decision:
    return Decision.objects.create(interrupt=interrupt_obj, user=user_obj, status=status, **fields)


@contextlib.contextmanager
def kept_for_the_module(django_db_blocker):
    """Rows made inside stay for a module's tests and are rolled back after it, as
    ``TestCase.setUpTestData``'s are: each test's own changes roll back to them."""
    with django_db_blocker.unblock():
        atomics = TestCase._enter_atomics()  # the test case's own: durable blocks nest inside them
        try:
            yield
        finally:
            TestCase._rollback_atomics(atomics)
