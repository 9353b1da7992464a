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
        # Every change to who may decide, and to where requests go and what
        # they carry, is a link of the audit trail, whichever door made it.
        from django.db.models.signals import m2m_changed, post_delete, post_save

        from .hub import trail
        from .models import Agent, Policy

        post_save.connect(trail.agent_saved, sender=Agent, dispatch_uid="countersign-trail-agent-saved")
        post_delete.connect(trail.agent_deleted, sender=Agent, dispatch_uid="countersign-trail-agent-deleted")
        post_save.connect(trail.policy_saved, sender=Policy, dispatch_uid="countersign-trail-policy-saved")
        post_delete.connect(trail.policy_deleted, sender=Policy, dispatch_uid="countersign-trail-policy-deleted")
        # Who holds the permission to decide: users' flags, groups and permissions, from either side.
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group, Permission
        from django.db.models.signals import pre_delete

        user = get_user_model()
        post_save.connect(trail.user_saved, sender=user, dispatch_uid="countersign-trail-user-saved")
        post_save.connect(trail.group_saved, sender=Group, dispatch_uid="countersign-trail-group-saved")
        for model in (user, Group, Permission):
            uid = f"countersign-trail-{model.__name__}"
            pre_delete.connect(trail.access_deleting, sender=model, dispatch_uid=f"{uid}-deleting")
            post_delete.connect(trail.access_deleted, sender=model, dispatch_uid=f"{uid}-deleted")
        for members in (user.groups.through, user.user_permissions.through, Group.permissions.through):
            m2m_changed.connect(trail.access_members_changed, sender=members,
                                dispatch_uid=f"countersign-trail-{members.__name__}")
        post_migrate.connect(_ensure_reviewers, sender=self, dispatch_uid="countersign-reviewers")
        # Open sockets close once their user may no longer read: logged out (in any
        # process), session deleted, deactivated, password changed or deleted.
        from django.contrib.sessions.models import Session

        from .live import standing

        post_delete.connect(standing.session_deleted, sender=Session, dispatch_uid="countersign-standing-session")
        post_save.connect(standing.user_saved, sender=user, dispatch_uid="countersign-standing-user-saved")
        post_delete.connect(standing.user_deleted, sender=user, dispatch_uid="countersign-standing-user-deleted")
        # The inbox's "waiting for me" reads each pending interrupt's governing policy.
        from .hub import policies

        post_save.connect(policies.policy_changed, sender=Policy, dispatch_uid="countersign-policy-saved")
        post_delete.connect(policies.policy_changed, sender=Policy, dispatch_uid="countersign-policy-deleted")
        for members in (Policy.groups.through, Policy.users.through):
            m2m_changed.connect(policies.members_changed, sender=members,
                                dispatch_uid=f"countersign-policy-restricted-{members.__name__}")
        # Last: after every other receiver of these signals (policies.members_changed
        # sets Policy.restricted with an UPDATE), so the entry holds the row as it ends.
        for members in (Policy.groups.through, Policy.users.through):
            m2m_changed.connect(trail.policy_members_changed, sender=members,
                                dispatch_uid=f"countersign-trail-{members.__name__}")
