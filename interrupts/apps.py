from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _register_demo_agents(sender, using, **kwargs):
    from django.conf import settings

    from .demo import register_demo_agents

    register_demo_agents(settings.COUNTERSIGN_SELF_URL)


def _ensure_reviewers(sender, using, **kwargs):
    # Migration 0010 creates the group; a flushed database (tests, `manage.py
    # flush`) gets it back here, after the permissions are recreated.
    from django.contrib.auth.models import Group, Permission

    decide = Permission.objects.using(using).filter(content_type__app_label="interrupts",
                                                    codename="decide_interrupt").first()
    if decide is not None:
        group, _ = Group.objects.using(using).get_or_create(name="Reviewers")
        group.permissions.add(decide)


class InterruptsConfig(AppConfig):
    name = "interrupts"
    verbose_name = "Countersign"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The built-in demo agents exist as soon as the database does.
        post_migrate.connect(_register_demo_agents, sender=self, dispatch_uid="countersign-demo-agents")
        # Agents and policies are ours: hub.agents and hub.policies write their
        # audit entries in the change. Who holds the permission to decide lives
        # in tables we do not own (users' flags, groups, permissions, from
        # either side), so those changes reach the trail through signals.
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group, Permission
        from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete

        from .hub.trail import access

        user = get_user_model()
        post_save.connect(access.user_saved, sender=user, dispatch_uid="countersign-trail-user-saved")
        post_save.connect(access.group_saved, sender=Group, dispatch_uid="countersign-trail-group-saved")
        for model in (user, Group, Permission):
            uid = f"countersign-trail-{model.__name__}"
            pre_delete.connect(access.access_deleting, sender=model, dispatch_uid=f"{uid}-deleting")
            post_delete.connect(access.access_deleted, sender=model, dispatch_uid=f"{uid}-deleted")
        for members in (user.groups.through, user.user_permissions.through, Group.permissions.through):
            m2m_changed.connect(access.access_members_changed, sender=members,
                                dispatch_uid=f"countersign-trail-{members.__name__}")
        post_migrate.connect(_ensure_reviewers, sender=self, dispatch_uid="countersign-reviewers")
        # Open sockets close once their user may no longer read: logged out (in any
        # process), session deleted, deactivated, password changed or deleted.
        from django.contrib.sessions.models import Session

        from .live import standing

        post_delete.connect(standing.session_deleted, sender=Session, dispatch_uid="countersign-standing-session")
        post_save.connect(standing.user_saved, sender=user, dispatch_uid="countersign-standing-user-saved")
        post_delete.connect(standing.user_deleted, sender=user, dispatch_uid="countersign-standing-user-deleted")
