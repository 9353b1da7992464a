"""The insight figures: exact for known decision times, on either database, at a fixed cost."""

from datetime import timedelta

import pytest
from django.utils import timezone

from interrupts.models import Decision, Interrupt, Run
from interrupts.reads import insight

from .. import factories as make

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def closed(agent, took, *, reviewer=None, action="approve", reason="confirmation", status=None, closed_reason="",
           ago=timedelta(hours=1), policy=None, escalated=False, raised=None):
    """An interrupt of ``agent`` raised ``took + ago`` before NOW and closed ``ago`` before it, by ``reviewer``."""
    made = make.interrupt(make.run(make.thread(agent=agent), status="interrupted"), reason=reason)
    status = status or (Interrupt.Status.CANCELLED if action == "cancel" else Interrupt.Status.RESOLVED)
    if reviewer is not None:
        make.decision(made, reviewer, status="cancelled" if action == "cancel" else "resolved", action=action,
                      payload=None if action == "cancel" else {"approved": action != "reject"})
    shut = NOW - ago
    raised = raised or shut - took
    Interrupt.objects.filter(pk=made.pk).update(
        status=status, created_at=raised, closed_at=shut, closed_reason=closed_reason,
        policy=policy, escalated_at=raised + took / 2 if escalated else None)
    return made


def pending(agent, age, *, reason="confirmation", policy=None, escalated_ago=None):
    made = make.interrupt(make.run(make.thread(agent=agent), status="interrupted"), reason=reason)
    Interrupt.objects.filter(pk=made.pk).update(
        created_at=NOW - age, policy=policy,
        escalated_at=NOW - escalated_ago if escalated_ago is not None else None)
    return made


def refused_resume(agent, code="BAD_ANSWER", *, ago=timedelta(hours=1), settled=False):
    parent = make.run(make.thread(agent=agent), status="interrupted")
    resume = make.run(parent.thread, parent=parent, resume_key=f"key-{parent.pk}", status="failed", error_code=code)
    Run.objects.filter(pk=resume.pk).update(finished_at=NOW - ago, settlement="closed" if settled else "")
    return resume


def seconds(*values):
    return [float(v) for v in values]


def test_nearest_rank_picks_a_time_someone_took():
    ordered = seconds(*range(1, 21))  # 1..20
    assert insight.nearest_rank(ordered, 50) == 10.0  # rank ceil(10) = 10
    assert insight.nearest_rank(ordered, 95) == 19.0  # rank ceil(19) = 19
    assert insight.nearest_rank(seconds(7), 95) == 7.0
    assert insight.nearest_rank(seconds(1, 2, 3), 50) == 2.0  # rank ceil(1.5) = 2
    assert insight.nearest_rank(seconds(1, 2, 3, 4), 50) == 2.0  # rank 2: not 2.5, never an interpolation
    assert insight.nearest_rank([], 50) is None


def test_time_to_decision_is_exact_for_known_times_by_agent_reason_and_reviewer():
    mailer, deployer = make.agent(name="mailer-i"), make.agent(name="deployer-i")
    alice, bob = make.user(username="alice-i"), make.user(username="bob-i")
    # mailer: 10 s .. 200 s in steps of 10 (20 decisions, alternately alice's and bob's).
    for n in range(1, 21):
        closed(mailer, timedelta(seconds=10 * n), reviewer=(alice, bob)[n % 2],
               reason=("confirmation", "tool_call")[n > 10])
    # deployer: 4 min 12 s and 1 h, both bob's rejections; microseconds survive on both databases.
    closed(deployer, timedelta(minutes=4, seconds=12, microseconds=250), reviewer=bob, action="reject")
    closed(deployer, timedelta(hours=1), reviewer=bob, action="reject")

    found = insight.figures("week", now=NOW)
    ttd = found["time_to_decision"]
    assert ttd["overall"] == {"count": 22, "p50_seconds": 110.0, "p95_seconds": 252.00025}
    assert ttd["by_agent"] == [
        {"agent": "mailer-i", "count": 20, "p50_seconds": 100.0, "p95_seconds": 190.0},
        {"agent": "deployer-i", "count": 2, "p50_seconds": 252.00025, "p95_seconds": 3600.0},
    ]
    assert ttd["by_reason"] == [
        {"reason": "confirmation", "count": 12, "p50_seconds": 60.0, "p95_seconds": 3600.0},
        {"reason": "tool_call", "count": 10, "p50_seconds": 150.0, "p95_seconds": 200.0},
    ]
    # bob: 10, 30, ..., 190 s, then 252 s and 1 h; alice: 20, 40, ..., 200 s.
    assert ttd["by_reviewer"] == [
        {"reviewer": "bob-i", "count": 12, "p50_seconds": 110.0, "p95_seconds": 3600.0},
        {"reviewer": "alice-i", "count": 10, "p50_seconds": 100.0, "p95_seconds": 200.0},
    ]


def test_the_closing_decision_counts_for_its_reviewer_and_a_revision_for_its_action():
    agent = make.agent()
    first, last = make.user(username="first-i"), make.user(username="last-i")
    # A quorum of two: the second approval closed it, and it is the second approver's time.
    quorum = closed(agent, timedelta(minutes=3), reviewer=first)
    make.decision(quorum, last, action="approve", payload={"approved": True})
    # Approved, then revised to a rejection: the standing answer is the rejection.
    revised = closed(agent, timedelta(minutes=5), reviewer=first)
    Decision.objects.filter(interrupt=revised).update(superseded_at=NOW)
    make.decision(revised, first, action="reject", payload={"approved": False})

    found = insight.figures("day", now=NOW)
    assert {r["reviewer"]: r["count"] for r in found["time_to_decision"]["by_reviewer"]} == {"first-i": 1, "last-i": 1}
    assert found["outcomes"]["counts"]["approve"] == 1 and found["outcomes"]["counts"]["reject"] == 1


def test_outcomes_and_their_rates_count_every_interrupt_closed_in_the_period():
    agent, reviewer = make.agent(), make.user()
    for action in ["approve", "approve", "approve", "edit", "respond", "reject", "cancel"]:
        closed(agent, timedelta(minutes=1), reviewer=reviewer, action=action)
    closed(agent, timedelta(days=1), status=Interrupt.Status.EXPIRED, closed_reason="Expired.")
    closed(agent, timedelta(minutes=2), status=Interrupt.Status.CANCELLED,
           closed_reason="The run failed after raising it (WORKER_LOST).")
    closed(agent, timedelta(minutes=1), reviewer=reviewer, ago=timedelta(days=8))  # before the week

    found = insight.figures("week", now=NOW)
    assert found["outcomes"]["total"] == 9
    assert found["outcomes"]["counts"] == {"approve": 3, "reject": 1, "edit": 1, "respond": 1, "cancel": 1,
                                           "expire": 1, "other": 1}
    assert found["outcomes"]["rates"]["approve"] == pytest.approx(3 / 9)
    assert found["outcomes"]["rates"]["expire"] == pytest.approx(1 / 9)
    # Only interrupts someone decided have a time to decision.
    assert found["time_to_decision"]["overall"]["count"] == 7


def test_periods_cover_the_last_day_week_and_month():
    agent, reviewer = make.agent(), make.user()
    for ago in [timedelta(hours=2), timedelta(days=3), timedelta(days=20), timedelta(days=40)]:
        closed(agent, timedelta(seconds=30), reviewer=reviewer, ago=ago)
    counts = {p: insight.figures(p, now=NOW)["time_to_decision"]["overall"]["count"] for p in insight.PERIODS}
    assert counts == {"day": 1, "week": 2, "month": 3}
    assert insight.period_of(None) == insight.period_of("") == "week"
    with pytest.raises(insight.UnknownPeriod, match="day, week, month"):
        insight.period_of("year")


def test_pending_now_by_agent_and_reason_with_breaches_and_escalations():
    mailer, deployer = make.agent(name="mailer-p"), make.agent(name="deployer-p")
    quick = make.policy(agent=mailer, target_minutes=10)
    pending(mailer, timedelta(minutes=11), policy=quick, escalated_ago=timedelta(minutes=1))  # past its target
    pending(mailer, timedelta(minutes=10), policy=quick)  # exactly at it: breached, as targets.target says
    pending(mailer, timedelta(minutes=9), policy=quick, reason="tool_call")  # not yet
    pending(deployer, timedelta(days=3), reason="tool_call")  # no target: never breached

    found = insight.figures("week", now=NOW)["pending"]
    assert found["total"] == 4
    assert found["by_agent"] == [
        {"agent": "mailer-p", "count": 3, "breached": 2, "escalated": 1},
        {"agent": "deployer-p", "count": 1, "breached": 0, "escalated": 0},
    ]
    assert found["by_reason"] == [
        {"reason": "confirmation", "count": 2, "breached": 2, "escalated": 1},
        {"reason": "tool_call", "count": 2, "breached": 0, "escalated": 0},
    ]


def test_breaches_count_interrupts_closed_after_their_target_and_escalations_in_the_period():
    agent, reviewer = make.agent(name="late-b"), make.user()
    policy = make.policy(agent=agent, target_minutes=5)
    closed(agent, timedelta(minutes=6), reviewer=reviewer, policy=policy, escalated=True)  # late, escalated
    closed(agent, timedelta(minutes=5), reviewer=reviewer, policy=policy)  # at the target: late
    closed(agent, timedelta(minutes=4), reviewer=reviewer, policy=policy)  # in time
    closed(agent, timedelta(hours=2), status=Interrupt.Status.EXPIRED, closed_reason="Expired.", policy=policy)
    closed(agent, timedelta(hours=2), reviewer=reviewer)  # no target
    pending(agent, timedelta(minutes=30), policy=policy, escalated_ago=timedelta(minutes=20))
    pending(agent, timedelta(days=10), policy=policy, escalated_ago=timedelta(days=9))  # escalated before the week

    found = insight.figures("week", now=NOW)["breaches"]
    assert found["closed_late"] == 3 and found["pending_past_target"] == 2 and found["escalated"] == 2
    assert found["by_agent"] == [{"agent": "late-b", "closed_late": 3, "pending_past_target": 2, "escalated": 2}]


def test_refused_answers_in_the_period_by_agent_and_code():
    mailer, deployer = make.agent(name="mailer-r"), make.agent(name="deployer-r")
    refused_resume(mailer)
    refused_resume(mailer, settled=True)
    refused_resume(deployer, "AGENT_UNREACHABLE")
    refused_resume(deployer, ago=timedelta(days=2))  # before the day
    make.run(make.thread(agent=mailer), status="failed", error_code="BAD_ANSWER")  # not a resume: not an answer

    found = insight.figures("day", now=NOW)["refused"]
    assert found["total"] == 3 and found["waiting"] == 2
    assert found["by_agent"] == [{"agent": "mailer-r", "count": 2, "waiting": 1},
                                 {"agent": "deployer-r", "count": 1, "waiting": 1}]
    assert found["by_code"] == [{"code": "BAD_ANSWER", "count": 2}, {"code": "AGENT_UNREACHABLE", "count": 1}]


def test_past_the_row_bound_the_newest_are_read_and_the_figures_say_so(monkeypatch):
    agent, reviewer = make.agent(), make.user()
    for n in range(1, 6):
        closed(agent, timedelta(seconds=n), reviewer=reviewer, ago=timedelta(minutes=n))
    monkeypatch.setattr(insight, "INSIGHT_MAX_ROWS", 3)
    found = insight.figures("day", now=NOW)
    assert found["truncated"] is True
    assert found["time_to_decision"]["overall"]["count"] == 3
    assert found["covers_since"] == (NOW - timedelta(minutes=3)).isoformat()
    assert insight.figures("day", now=NOW)["row_limit"] == 3


@pytest.mark.parametrize("size", [3, 30])
def test_the_figures_cost_three_queries_whatever_the_rows(size, django_assert_num_queries):
    agents = [make.agent() for _ in range(3)]
    reviewers = [make.user() for _ in range(3)]
    policy = make.policy(agent=agents[0], target_minutes=1)
    for n in range(size):
        agent = agents[n % 3]
        closed(agent, timedelta(seconds=n + 1), reviewer=reviewers[n % 3], action=insight.ACTIONS[n % 5],
               policy=policy if agent == agents[0] else None, escalated=n % 2 == 0)
        pending(agent, timedelta(minutes=n), policy=policy if agent == agents[0] else None)
        refused_resume(agent)
    with django_assert_num_queries(3):
        found = insight.figures("week")
    assert found["time_to_decision"]["overall"]["count"] == size
    assert found["pending"]["total"] == size and found["refused"]["total"] == size
