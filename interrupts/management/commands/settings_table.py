"""``manage.py settings_table [--write]``: docs/settings.md's table of every setting, from interrupts/conf.py."""

import re
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from interrupts import conf

DOC = Path(settings.BASE_DIR) / "docs" / "settings.md"
MARKED = re.compile(r"(<!-- settings:table -->\n).*?(<!-- /settings:table -->)", re.S)


def with_table(text: str) -> str:
    """``text`` with the table between its markers regenerated from conf.SETTINGS."""
    if not MARKED.search(text):
        raise CommandError(f"{DOC} has no <!-- settings:table --> … <!-- /settings:table --> markers")
    return MARKED.sub(lambda m: m.group(1) + conf.settings_table() + m.group(2), text, count=1)


class Command(BaseCommand):
    help = "Print the settings table generated from interrupts/conf.py; --write puts it into docs/settings.md."

    def add_arguments(self, parser):
        parser.add_argument("--write", action="store_true", help="Rewrite the table in docs/settings.md.")

    def handle(self, *args, write=False, **options):
        if not write:
            self.stdout.write(conf.settings_table(), ending="")
            return
        DOC.write_text(with_table(DOC.read_text()))
        self.stdout.write(f"rewrote the settings table in {DOC.relative_to(settings.BASE_DIR)}")
