"""The reads that pages and the API share."""

from dataclasses import dataclass

from django.db.models import Count, Q

from .models import Agent, Interrupt, Run, Thread


@dataclass(frozen=True)
class Overview:
    pending_interrupts: int
    threads: int
    runs_in_flight: int
    agents: list


def overview() -> Overview:
    """Counts for the landing page: what waits for a person, what is running."""
    agents = list(
        Agent.objects.annotate(
            pending=Count(
                "runs__interrupts",
                filter=Q(runs__interrupts__status=Interrupt.Status.PENDING),
            )
        ).order_by("name")
    )
    return Overview(
        pending_interrupts=Interrupt.objects.filter(status=Interrupt.Status.PENDING).count(),
        threads=Thread.objects.count(),
        runs_in_flight=Run.objects.filter(
            status__in=[Run.Status.QUEUED, Run.Status.STREAMING]
        ).count(),
        agents=agents,
    )
