"""Create the demo reviewer login that `make serve` prints, if it is missing."""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from ...rules.eligibility import REVIEWERS_GROUP

USERNAME = "reviewer"
PASSWORD = "countersign"


class Command(BaseCommand):
    help = "Create the demo reviewer (reviewer / countersign, staff, superuser) for local use."

    def handle(self, *args, **options):
        if not settings.DEBUG:
            # A well-known password must never exist on a production database.
            raise CommandError("Refusing to create the demo login with DEBUG off.")
        User = get_user_model()
        user, created = User.objects.get_or_create(
            username=USERNAME,
            defaults={"first_name": "Demo", "last_name": "Reviewer", "is_staff": True, "is_superuser": True},
        )
        # Superusers hold every permission; the group says so where people look.
        user.groups.add(Group.objects.get(name=REVIEWERS_GROUP))
        if created:
            user.set_password(PASSWORD)
            user.save(update_fields=["password"])
            self.stdout.write(f"Created the demo login: {USERNAME} / {PASSWORD}")
        else:
            self.stdout.write(f"Demo login exists: {USERNAME} (password unchanged)")
