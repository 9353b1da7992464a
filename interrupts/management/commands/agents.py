"""Register AG-UI agents from the command line: list, add, remove, rotate-secret.

A signing secret is printed once, when it is made (``add`` of a new agent,
``rotate-secret``), on a line ``signing secret: <secret>`` a script can
grep; ``list`` never shows it.
"""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from interrupts.hub import agents
from interrupts.models import Agent
from interrupts.protocol import dialects


class Command(BaseCommand):
    help = "List, add or remove the AG-UI agents Countersign calls."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="Show every registered agent.")
        add = sub.add_parser("add", help="Register an agent (or change its URL and header).")
        add.add_argument("name", help="Short name, e.g. 'support-bot'.")
        add.add_argument("url", help="Where RunAgentInput is POSTed.")
        add.add_argument("--header", metavar="K:V",
                         help="A header with the agent's credential, e.g. 'Authorization:Bearer x'.")
        add.add_argument("--description", default="")
        add.add_argument("--dialect", choices=list(dialects.DIALECTS),
                         help="An override of how the agent raises interrupts: 'agui' (the default: an "
                              "interrupt outcome, and LangGraph's on_interrupt detected from the runs) or "
                              "'langgraph-legacy' (always read on_interrupt). "
                              "Left out: a new agent gets 'agui', an existing one keeps its own.")
        remove = sub.add_parser("remove", help="Remove an agent that has no runs.")
        remove.add_argument("name")
        rotate = sub.add_parser("rotate-secret", help="Give an agent a new signing secret and print it once.")
        rotate.add_argument("name")

    def handle(self, *args, action, **options):
        getattr(self, f"do_{action.replace('-', '_')}")(**options)

    def do_list(self, **options):
        for agent in Agent.objects.order_by("name"):
            credential = f"  {agent.auth_header}: {agent.masked_auth_value}" if agent.auth_value else ""
            builtin = "  (built-in)" if agent.builtin else ""
            dialect = f"  dialect {agent.dialect}" if agent.dialect != dialects.AGUI else ""
            self.stdout.write(f"{agent.name}  {agent.url}{credential}{dialect}{builtin}")

    def do_add(self, name, url, header, description, dialect, **options):
        fields = {"url": url, "description": description}
        if dialect:
            fields["dialect"] = dialect
        if header:
            key, sep, value = header.partition(":")
            if not sep or not key.strip() or not value.strip():
                raise CommandError(f"--header {header!r}: write it as Name:value, e.g. 'Authorization:Bearer abc'.")
            fields |= {"auth_header": key.strip(), "auth_value": value.strip()}
        agent = Agent.objects.filter(name=name).first() or Agent(name=name)
        for field, value in fields.items():
            setattr(agent, field, value)
        # Given on this command line: kept even when the URL moves to another origin.
        agent.credential_given = bool(header)
        try:
            agent.full_clean()
        except ValidationError as problem:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in problem.message_dict.items())) from None
        created = agent.pk is None
        agents.save(agent)
        self.stdout.write(f"{'Added' if created else 'Updated'} agent {name} at {url}.")
        if created:
            self.stdout.write(f"signing secret: {agent.signing_secret}")
            self.stdout.write("Give it to the agent to verify Countersign-Signature; it is not shown again.")
        if agent.credential_dropped:
            self.stderr.write(f"{Agent.CREDENTIAL_DROPPED} (--header 'Name:value')")

    def do_remove(self, name, **options):
        agent = Agent.objects.filter(name=name).first()
        if agent is None:
            raise CommandError(f"No agent named {name!r}.")
        if agent.runs.exists():
            raise CommandError(f"Agent {name} has runs; its history must stay, so it cannot be removed.")
        agents.delete(agent)
        self.stdout.write(f"Removed agent {name}.")

    def do_rotate_secret(self, name, **options):
        agent = Agent.objects.filter(name=name).first()
        if agent is None:
            raise CommandError(f"No agent named {name!r}.")
        secret = agents.rotate_signing_secret(agent)
        self.stdout.write(f"Rotated the signing secret of agent {name}; requests are signed with the new one now.")
        self.stdout.write(f"signing secret: {secret}")
