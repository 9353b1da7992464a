"""API tokens from the command line: create (printed once, alone on stdout), list, revoke.

Only a digest is kept, so a token cannot be shown again; ``list`` and ``revoke`` name it by its
first characters (docs/operations.md, "API tokens").
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from interrupts.hub import tokens
from interrupts.models import APIToken


class Command(BaseCommand):
    help = "Create, list or revoke API tokens (Authorization: Token <key>)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Make a token for a user and print it, once.")
        create.add_argument("username")
        create.add_argument("--days", type=float, default=None,
                            help="How long it lasts; 0: until revoked. Default: COUNTERSIGN_TOKEN_DAYS (0 unless set).")
        listing = sub.add_parser("list", help="Show tokens by their first characters, never in full.")
        listing.add_argument("username", nargs="?", help="Only this user's.")
        revoke = sub.add_parser("revoke", help="Revoke a token, or every token of a user.")
        which = revoke.add_mutually_exclusive_group(required=True)
        which.add_argument("key", nargs="?", help=f"The token, or its first {tokens.KEY_CHARS} characters as listed.")
        which.add_argument("--user", metavar="USERNAME", help="Revoke every token of this user.")

    def handle(self, *args, action, **options):
        getattr(self, f"do_{action}")(**options)

    def _user(self, username):
        try:
            return get_user_model().objects.get_by_natural_key(username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"No user named {username!r}.") from None

    def do_create(self, username, days, **options):
        user = self._user(username)
        if not user.is_active:
            raise CommandError(f"{username!r} is inactive: a token would be refused.")
        try:
            row, key = tokens.issue(user, days=days)
        except ValueError as problem:
            raise CommandError(str(problem)) from None
        self.stdout.write(key)
        lasts = f"until {row.expiry:%Y-%m-%d %H:%M} UTC" if row.expiry else "until revoked"
        self.stderr.write(f"Token {row} for {username}, {lasts}. Shown once: only its digest is kept.")

    def do_list(self, username=None, **options):
        rows = APIToken.objects.select_related("user").order_by("user__username", "created")
        if username:
            rows = rows.filter(user=self._user(username))
        for row in rows:
            lasts = f"expires {row.expiry:%Y-%m-%d %H:%M}" if row.expiry else "no expiry"
            self.stdout.write(f"{row}  {row.user.get_username()}  created {row.created:%Y-%m-%d %H:%M}  {lasts}")

    def do_revoke(self, key=None, user=None, **options):
        if user:
            count = tokens.revoke_all(self._user(user))
            self.stdout.write(f"Revoked {count} token(s) of {user}.")
            return
        try:
            count = tokens.revoke(key)
        except ValueError as problem:
            raise CommandError(str(problem)) from None
        if not count:
            raise CommandError("No token matches.")
        self.stdout.write(f"Revoked {count} token(s).")
