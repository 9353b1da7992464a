"""What Prometheus scrapes at /api/metrics/: read from the database at scrape time, in five aggregate queries.

Every figure is computed from the rows, never counted in a process: with
several server processes each would count only its own requests, and a
restart would drop them. The database is the one place all processes agree
on, so any process answers a scrape with the same numbers. Each metric is one
GROUP BY query whatever the number of rows (histogram buckets are
conditional counts in that same query), so a scrape costs the same with ten
interrupts or a million.

Counters are counts of rows that are never deleted (decisions are
immutable, failed runs stay failed), so they only grow, as Prometheus
expects of a counter.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from ..models import Decision, Interrupt, Run

# Upper bounds in seconds. People take minutes to days to decide.
DECISION_BUCKETS = (10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800)
# A resume should reach its agent within a second; minutes mean the agent was unreachable and retried.
DELIVERY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


def _seconds(took) -> float:
    return took.total_seconds() if took is not None else 0.0


def _histogram(name: str, documentation: str, rows, bounds, *, by: str) -> HistogramMetricFamily:
    """A histogram labelled ``agent`` of ``rows`` (aliasing ``took``) grouped by the field ``by``, in one query:
    per group, how many took at most each bound, their total and their count."""
    family = HistogramMetricFamily(name, documentation, labels=["agent"])
    buckets = {f"le_{n}": Count("pk", filter=Q(took__lte=timedelta(seconds=bound))) for n, bound in enumerate(bounds)}
    grouped = rows.values(label=F(by)).order_by("label").annotate(count=Count("pk"), total=Sum("took"), **buckets)
    for row in grouped:
        counts = [(repr(float(bound)), row[f"le_{n}"]) for n, bound in enumerate(bounds)] + [("+Inf", row["count"])]
        family.add_metric([row["label"]], counts, _seconds(row["total"]))
    return family


def pending_interrupts() -> GaugeMetricFamily:
    family = GaugeMetricFamily("countersign_pending_interrupts", "Interrupts waiting for a decision now.",
                               labels=["agent", "reason"])
    rows = (Interrupt.objects.filter(status=Interrupt.Status.PENDING)
            .values(agent=F("run__agent__name"), kind=F("reason")).order_by("agent", "kind")
            .annotate(n=Count("pk")))
    for row in rows:
        family.add_metric([row["agent"], row["kind"]], row["n"])
    return family


def decisions_total() -> tuple[CounterMetricFamily, ...]:
    """Every decision by action and agent; and, of them, those a standing grant or a policy's rule took
    (one query for all three)."""
    # Every decision anyone took, revised (superseded) ones included: each was a person's act, or their grant's.
    family = CounterMetricFamily("countersign_decisions", "Decisions taken, by action and agent.",
                                 labels=["action", "agent"])
    automatic = {
        "by_grant": CounterMetricFamily("countersign_grant_approvals", "Approvals taken by a standing grant, "
                                        "by agent.", labels=["agent"]),
        "by_policy": CounterMetricFamily("countersign_policy_approvals", "Approvals taken by a policy's "
                                         "auto-approve rule, by agent.", labels=["agent"]),
    }
    rows = (Decision.objects.values("action", agent=F("interrupt__run__agent__name")).order_by("action", "agent")
            .annotate(n=Count("pk"), by_grant=Count("pk", filter=Q(grant__isnull=False)),
                      by_policy=Count("pk", filter=Q(by_policy=True))))
    by_agent: dict[tuple[str, str], int] = {}
    for row in rows:
        family.add_metric([row["action"], row["agent"]], row["n"])
        for kind in automatic:
            if row[kind]:
                by_agent[kind, row["agent"]] = by_agent.get((kind, row["agent"]), 0) + row[kind]
    for (kind, agent), n in by_agent.items():
        automatic[kind].add_metric([agent], n)
    return family, *automatic.values()


def time_to_decision() -> HistogramMetricFamily:
    # Closed by a decision: a closed_reason says it closed without one (expiry, a failed run, a refused resume
    # closed). An interrupt reopened and decided again is measured from when it was raised.
    decided = (Interrupt.objects.filter(status__in=[Interrupt.Status.RESOLVED, Interrupt.Status.CANCELLED],
                                        closed_at__isnull=False, closed_reason="")
               .alias(took=ExpressionWrapper(F("closed_at") - F("created_at"), output_field=DurationField())))
    return _histogram("countersign_time_to_decision_seconds",
                      "From an interrupt raised to the decision that closed it, by agent.",
                      decided, DECISION_BUCKETS, by="run__agent__name")


def stream_errors_total() -> CounterMetricFamily:
    family = CounterMetricFamily("countersign_stream_errors", "Runs that failed, by error code.", labels=["code"])
    rows = (Run.objects.filter(status=Run.Status.FAILED).values("error_code").order_by("error_code")
            .annotate(n=Count("pk")))
    for row in rows:
        family.add_metric([row["error_code"]], row["n"])
    return family


def resume_delivery() -> HistogramMetricFamily:
    # A resume run is written in the transaction of the decision that closes its batch (or of the re-send
    # of a refused one), so its created_at is that moment: created → started is decision → delivered.
    started = (Run.objects.filter(resume_key__isnull=False, started_at__isnull=False)
               .alias(took=ExpressionWrapper(F("started_at") - F("created_at"), output_field=DurationField())))
    return _histogram("countersign_resume_delivery_seconds",
                      "From the decision that closed a batch to its resume run starting, by agent.",
                      started, DELIVERY_BUCKETS, by="agent__name")


class CountersignCollector(Collector):
    """Every countersign_… metric, read afresh on each scrape."""

    def collect(self):
        yield pending_interrupts()
        yield from decisions_total()
        yield time_to_decision()
        yield stream_errors_total()
        yield resume_delivery()


def registry() -> CollectorRegistry:
    """A registry holding only Countersign's collector: not the process's default one, whose
    per-process figures (its own CPU, memory, GC) would differ between the processes behind one address."""
    made = CollectorRegistry(auto_describe=False)
    made.register(CountersignCollector())
    return made
