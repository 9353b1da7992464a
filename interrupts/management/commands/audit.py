"""The audit trail from the command line: ``audit verify`` recomputes the chain and cross-checks every row.

Rows: decisions (with their interrupts and runs), expiries, agents,
policies, groups and users, each against its last entry (``hub.trail.verify``).
``--expect-head SEQ:HASH`` holds the chain to heads kept outside the
database (an export, a webhook delivery, a log line, ``audit head``): the
only way to see its newest entries deleted, or the chain rewritten whole.
"""

import argparse
import sys

from django.core.management.base import BaseCommand

from interrupts.hub.trail import chain
from interrupts.hub.trail.verify import verify


def _head(text: str) -> chain.Head:
    try:
        return chain.Head.parse(text)
    except ValueError as wrong:
        raise argparse.ArgumentTypeError(str(wrong)) from None


class Command(BaseCommand):
    help = "Verify the hash-chained audit trail: exit 0 if intact, 1 naming the first broken or missing entry."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        verify = sub.add_parser("verify", help="Recompute the chain from entry 1 and check every decision, expiry, "
                                               "agent, policy, group and user against its last entry.")
        verify.add_argument("--expect-head", action="append", default=[], metavar="SEQ:HASH", type=_head,
                            dest="expect",
                            help="A head seen outside the database (an export, a webhook body, a log line, "
                                 "`audit head`): fail if that entry is gone or differs. Repeatable.")
        sub.add_parser("head", help="Print the chain's head now, SEQ:HASH: keep it where the database's "
                                    "administrators cannot write, for `verify --expect-head`.")

    def handle(self, *args, action, **options):
        getattr(self, f"do_{action}")(**options)

    def do_head(self, **options):
        self.stdout.write(str(chain.head()))

    def do_verify(self, expect=(), **options):
        def progress(done: int) -> None:
            self.stderr.write(f"… {done:,} entries verified")

        result = verify(progress=progress, expect=expect)
        head = chain.Head(result.head_seq, result.head_hash)
        if result.ok:
            self.stdout.write(f"verified {result.entries} entries, head {head}")
            return
        for problem in result.problems:
            self.stderr.write(f"BROKEN: {problem}")
        if result.more:
            self.stderr.write(f"… and {result.more} more problems")
        self.stderr.write(f"the chain holds through entry {result.head_seq} ({result.head_hash})")
        # The first line names the first broken entry; SystemExit carries status 1 through call_command too.
        sys.exit(1)
