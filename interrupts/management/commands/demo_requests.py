"""Queue sample requests from the demo agents on a new database, so a first login finds work in the inbox."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from ...demo import register_demo_agents
from ...hub import runs
from ...models import Agent, Thread
from .demo_reviewer import USERNAME

#: (demo agent, what the person asks): one of each kind of request the inbox shows.
SAMPLES = (
    ("mailer", "Email dana@example.com about the launch, saying We ship on Friday."),
    ("deployer", "Deploy build 812 to staging"),
    ("janitor", "Clean up /tmp/cache and /var/log/old-builds"),
    ("filing", "File the quarterly report"),
    ("planner", "Book the Lisbon offsite"),
)


class Command(BaseCommand):
    help = "Queue one sample request from each demo agent, once: only while the database has no thread."

    def handle(self, *args, **options):
        if not settings.DEBUG:
            raise CommandError("Refusing to add sample requests with DEBUG off.")
        if Thread.objects.exists():
            self.stdout.write("Threads exist already: no sample requests added.")
            return
        # Where `serve` will point them again, with its own port; the runs wait for it to start.
        register_demo_agents(settings.COUNTERSIGN_SELF_URL)
        reviewer = get_user_model().objects.filter(username=USERNAME).first()
        for name, message in SAMPLES:
            runs.start_run(Agent.objects.get(name=name), user=reviewer, message=message)
        self.stdout.write(f"Queued {len(SAMPLES)} sample requests: they reach the inbox as the server starts.")
