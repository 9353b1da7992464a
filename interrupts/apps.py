from django.apps import AppConfig


class InterruptsConfig(AppConfig):
    name = "interrupts"
    verbose_name = "Countersign"
    default_auto_field = "django.db.models.BigAutoField"
