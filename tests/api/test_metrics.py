"""GET /api/metrics/: every countersign_… figure read from the rows at scrape time, for staff only, at a fixed cost."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from interrupts.models import Interrupt, Run
from interrupts.reads import metrics

from .. import factories as make

pytestmark = pytest.mark.django_db

URL = "/api/metrics/"


def _interrupt(agent, reason="confirmation", *, took=None, status=Interrupt.Status.PENDING, closed_reason=""):
    """An interrupt of ``agent``; with ``took``, closed that long after it was raised."""
    made = make.interrupt(make.run(make.thread(agent=agent), status="interrupted"), reason=reason)
    if took is not None:
        raised = timezone.now() - timedelta(days=10)
        Interrupt.objects.filter(pk=made.pk).update(status=status, created_at=raised, closed_at=raised + took,
                                                    closed_reason=closed_reason)
    return made


def _resume(agent, *, delivered_after=None):
    parent = make.run(make.thread(agent=agent), status="interrupted")
    resume = make.run(parent.thread, parent=parent, resume_key=f"key-{parent.pk}", status="succeeded")
    if delivered_after is not None:
        Run.objects.filter(pk=resume.pk).update(started_at=resume.created_at + delivered_after)
    return resume


def scrape(client, **headers) -> dict:
    response = client.get(URL, **headers)
    assert response.status_code == 200, response.content[:300]
    return {family.name: family for family in text_string_to_metric_families(response.content.decode())}


def samples(family, suffix="") -> dict[tuple, float]:
    """``{(label values, sorted by label name): value}`` of the family's samples named ``name + suffix``."""
    return {tuple(v for _k, v in sorted(s.labels.items())): s.value
            for s in family.samples if s.name == family.name + suffix}


@pytest.fixture
def world():
    mailer, deployer = make.agent(name="mailer-m"), make.agent(name="deployer-m")
    reviewer = make.user()
    for reason in ["confirmation", "confirmation", "tool_call"]:
        _interrupt(mailer, reason)
    _interrupt(deployer, "tool_call")
    # Decided: mailer in 20 s and 2 h, deployer in 45 min (a cancel closes it too).
    for agent, took, status in [(mailer, timedelta(seconds=20), Interrupt.Status.RESOLVED),
                                (mailer, timedelta(hours=2), Interrupt.Status.RESOLVED),
                                (deployer, timedelta(minutes=45), Interrupt.Status.CANCELLED)]:
        decided = _interrupt(agent, took=took, status=status)
        make.decision(decided, reviewer, status="resolved" if status == "resolved" else "cancelled",
                      action="approve" if status == "resolved" else "cancel",
                      payload={"approved": True} if status == "resolved" else None)
    # Closed without a decision of anyone's: not a time to decide.
    _interrupt(mailer, took=timedelta(days=1), status=Interrupt.Status.EXPIRED, closed_reason="Expired.")
    _interrupt(mailer, took=timedelta(minutes=1), status=Interrupt.Status.CANCELLED,
               closed_reason="The run failed after raising it (WORKER_LOST).")
    # A revised answer (still pending): the superseded decision was taken too, and stays counted.
    revised = _interrupt(deployer)
    make.decision(revised, reviewer, action="reject", payload={"approved": False}, superseded_at=timezone.now())
    make.decision(revised, make.user(), action="edit", payload={"approved": True})
    make.run(make.thread(agent=mailer), status="failed", error_code="AGENT_UNREACHABLE")
    make.run(make.thread(agent=deployer), status="failed", error_code="AGENT_UNREACHABLE")
    make.run(make.thread(agent=deployer), status="failed", error_code="WORKER_LOST")
    make.run(make.thread(agent=deployer), status="succeeded", error_code="")
    _resume(mailer, delivered_after=timedelta(milliseconds=200))
    _resume(mailer, delivered_after=timedelta(seconds=40))
    _resume(deployer)  # not started yet: not delivered
    return {"mailer": mailer, "deployer": deployer}


@pytest.fixture
def scraper(client):
    """A staff user's API token, as Prometheus sends it."""
    user = make.user(username="prometheus", is_staff=True)
    return {"HTTP_AUTHORIZATION": f"Token {make.token(user)}"}


def test_every_figure_is_read_from_the_rows(client, world, scraper):
    families = scrape(client, **scraper)
    assert all(name.startswith("countersign_") for name in families), sorted(families)

    pending = families["countersign_pending_interrupts"]
    assert pending.type == "gauge"
    assert samples(pending) == {("mailer-m", "confirmation"): 2, ("mailer-m", "tool_call"): 1,
                                ("deployer-m", "tool_call"): 1, ("deployer-m", "confirmation"): 1}

    decided = families["countersign_decisions"]
    assert decided.type == "counter"
    assert samples(decided, "_total") == {("approve", "mailer-m"): 2, ("cancel", "deployer-m"): 1,
                                          ("reject", "deployer-m"): 1, ("edit", "deployer-m"): 1}

    took = families["countersign_time_to_decision_seconds"]
    assert took.type == "histogram"
    assert samples(took, "_count") == {("mailer-m",): 2, ("deployer-m",): 1}
    assert samples(took, "_sum") == {("mailer-m",): 20 + 7200, ("deployer-m",): 2700}
    buckets = {(labels["agent"], labels["le"]): s.value for s in took.samples if s.name.endswith("_bucket")
               for labels in [s.labels]}
    assert buckets["mailer-m", "10.0"] == 0 and buckets["mailer-m", "30.0"] == 1
    assert buckets["mailer-m", "3600.0"] == 1 and buckets["mailer-m", "7200.0"] == 2
    assert buckets["mailer-m", "+Inf"] == 2
    assert buckets["deployer-m", "1800.0"] == 0 and buckets["deployer-m", "3600.0"] == 1

    errors = families["countersign_stream_errors"]
    assert errors.type == "counter"
    assert samples(errors, "_total") == {("AGENT_UNREACHABLE",): 2, ("WORKER_LOST",): 1}

    delivery = families["countersign_resume_delivery_seconds"]
    assert samples(delivery, "_count") == {("mailer-m",): 2}
    assert samples(delivery, "_sum")[("mailer-m",)] == pytest.approx(40.2)
    buckets = {s.labels["le"]: s.value for s in delivery.samples if s.name.endswith("_bucket")}
    assert buckets["0.1"] == 0 and buckets["0.25"] == 1 and buckets["30.0"] == 1 and buckets["60.0"] == 2


def test_a_row_any_process_wrote_shows_in_the_next_scrape(client, scraper):
    # No process counts anything itself: what another server process wrote is in every process's answer.
    agent = make.agent(name="late")
    assert "countersign_pending_interrupts" in scrape(client, **scraper)
    assert not samples(scrape(client, **scraper)["countersign_pending_interrupts"])
    _interrupt(agent)
    assert samples(scrape(client, **scraper)["countersign_pending_interrupts"]) == {("late", "confirmation"): 1}


def _grow(size: int) -> None:
    agents = [make.agent() for _ in range(3)]
    reviewer = make.user()
    for n in range(size):
        agent = agents[n % 3]
        _interrupt(agent, reason=f"reason-{n % 4}")
        decided = _interrupt(agent, took=timedelta(minutes=n), status=Interrupt.Status.RESOLVED)
        make.decision(decided, reviewer, action="approve", payload={"approved": True})
        make.run(make.thread(agent=agent), status="failed", error_code=f"CODE_{n % 5}")
        _resume(agent, delivered_after=timedelta(seconds=n))


def test_a_scrape_costs_the_same_queries_whatever_the_number_of_rows():
    def cost() -> int:
        with CaptureQueriesContext(connection) as queries:
            list(metrics.registry().collect())
        return len(queries)

    _grow(2)
    few = cost()
    _grow(25)
    assert cost() == few == 5  # one per metric


def test_only_staff_may_scrape(client, world):
    anonymous = client.get(URL)
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "NOT_AUTHENTICATED"
    colleague = make.user()
    token = make.token(colleague)
    by_token = client.get(URL, HTTP_AUTHORIZATION=f"Token {token}")
    assert by_token.status_code == 403 and by_token.json()["code"] == "PERMISSION_DENIED"
    client.force_login(colleague)
    assert client.get(URL).status_code == 403
    client.force_login(make.user(is_staff=True))
    response = client.get(URL)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    assert "countersign_pending_interrupts" in scrape(client)


def test_a_scraper_asking_for_openmetrics_or_text_only_is_answered(client, world, scraper):
    openmetrics = client.get(URL, HTTP_ACCEPT="application/openmetrics-text;version=1.0.0", **scraper)
    assert openmetrics.status_code == 200
    assert openmetrics["Content-Type"].startswith("application/openmetrics-text")
    assert openmetrics.content.decode().rstrip().endswith("# EOF")
    plain = client.get(URL, HTTP_ACCEPT="text/plain;version=0.0.4", **scraper)
    assert plain.status_code == 200 and plain["Content-Type"].startswith("text/plain")
