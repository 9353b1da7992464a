from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _register_demo_agents(sender, using, **kwargs):
    from django.conf import settings

    from .demo import register_demo_agents

    register_demo_agents(settings.COUNTERSIGN_SELF_URL)


class InterruptsConfig(AppConfig):
    name = "interrupts"
    verbose_name = "Countersign"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The built-in demo agents exist as soon as the database does.
        post_migrate.connect(_register_demo_agents, sender=self, dispatch_uid="countersign-demo-agents")
