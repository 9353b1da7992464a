"""Runs from the command line: list the active ones, stop one (``runs.cancel``)."""

import getpass

from django.core.management.base import BaseCommand, CommandError

from interrupts.hub import runs
from interrupts.models import Run


class Command(BaseCommand):
    help = "List runs, or stop a streaming or waiting one as an operator."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="Show runs, newest first.")
        listing.add_argument("--active", action="store_true", help="Only runs queued or streaming.")
        listing.add_argument("--limit", type=int, default=100)
        cancel = sub.add_parser("cancel", help="Stop a run: it fails with CANCELLED_BY_OPERATOR.")
        cancel.add_argument("run_id", help="The runId.")
        cancel.add_argument("--thread", help="The threadId, when several threads have a run with this runId.")

    def handle(self, *args, action, **options):
        getattr(self, f"do_{action}")(**options)

    def do_list(self, active, limit, **options):
        found = Run.objects.select_related("thread", "agent").order_by("-created_at", "-pk")
        if active:
            found = found.filter(status__in=[Run.Status.QUEUED, Run.Status.STREAMING])
        for run in found[:limit]:
            where = f"  by {run.claimed_by}" if run.status == Run.Status.STREAMING else ""
            waiting = f"  ({run.delivery})" if run.awaiting_agent else ""
            self.stdout.write(f"{run.run_id}  thread {run.thread.thread_id}  agent {run.agent.name}  "
                              f"{run.status}{waiting}{where}  "
                              f"since {run.started_at or run.created_at:%Y-%m-%d %H:%M:%S}")

    def do_cancel(self, run_id, thread, **options):
        found = Run.objects.select_related("thread").filter(run_id=run_id)
        if thread:
            found = found.filter(thread__thread_id=thread)
        matches = list(found[:2])
        if not matches:
            raise CommandError(f"No run {run_id!r}" + (f" in thread {thread!r}." if thread else "."))
        if len(matches) > 1:
            raise CommandError(f"Several threads have a run {run_id!r}: add --thread <threadId>.")
        run = matches[0]
        # Named in the run's RUN_ERROR: who ran the command, from where.
        if not runs.cancel(run, by=f"{getpass.getuser()} (manage.py runs cancel)"):
            run.refresh_from_db()
            raise CommandError(f"Run {run_id} is {run.status}: it already ended, there is nothing to stop.")
        self.stdout.write(f"Stopped run {run_id} of thread {run.thread.thread_id}.")
