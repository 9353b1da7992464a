"""Signal receivers for tables we do not own: users, groups, permissions and their memberships (apps.py)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

from ...models import Policy
from .chain import last_data, record
from .changes import record_policy
from .content import group_content, group_rows, signable, user_content, user_rows, username

# The user fields whose change is worth an entry.
_USER_TRACKED = ("username", "active", "staff", "superuser", "groupIds", "permissions")


def _record_if_changed(subject: str, data: dict, tracked: tuple[str, ...], created: str, changed: str) -> None:
    last = last_data(subject)
    if last is None:
        record(created, data, subject=subject)
    elif any(last.get(k) != data.get(k) for k in tracked):
        record(changed, data, subject=subject)


def _record_user(pk) -> None:
    # Read afresh: a receiver's instance may hold memberships cached before the change.
    if (user := user_rows().filter(pk=pk).first()) is not None:
        _record_if_changed(f"user:{pk}", user_content(user), _USER_TRACKED, "user.created", "user.changed")


def _record_group(pk) -> None:
    if (group := group_rows().filter(pk=pk).first()) is not None:
        _record_if_changed(f"group:{pk}", group_content(group), ("name", "permissions"),
                           "group.created", "group.changed")


def user_saved(sender, instance, created, raw=False, update_fields=None, **kwargs) -> None:
    """post_save of User: an entry when it is new or its name, active/staff/superuser flags changed."""
    if raw or (update_fields is not None and set(update_fields) <= {"last_login", "password"}):
        return  # a login or a new password changes nothing the trail holds (and every login saves)
    _record_user(instance.pk)


def group_saved(sender, instance, created, raw=False, **kwargs) -> None:
    """post_save of Group: an entry when it is new or renamed."""
    if not raw:
        _record_group(instance.pk)


def _policies_naming(field: str, pk) -> list[int]:
    return list(Policy.objects.filter(**{field: pk}).values_list("pk", flat=True))


def access_deleting(sender, instance, **kwargs) -> None:
    """pre_delete of User, Group and Permission: note whom and which policies the row's memberships touch.

    Deleting the row deletes its membership rows with no m2m_changed; the
    post_delete receiver records each of them as changed.
    """
    if isinstance(instance, Permission):
        touched = (list(instance.user_set.values_list("pk", flat=True)),
                   list(instance.group_set.values_list("pk", flat=True)), [])
    elif isinstance(instance, Group):
        touched = (list(instance.user_set.values_list("pk", flat=True)), [],
                   _policies_naming("groups", instance.pk) + _policies_naming("backup_group", instance.pk))
    else:
        touched = ([], [], _policies_naming("users", instance.pk))
    instance._countersign_touched = touched


def access_deleted(sender, instance, **kwargs) -> None:
    """post_delete of User, Group and Permission: an entry for the row that went, then each one it touched."""
    users, groups, policies = getattr(instance, "_countersign_touched", ([], [], []))
    if isinstance(instance, Group):
        record("group.deleted", {"group": instance.pk, "name": instance.name}, subject=f"group:{instance.pk}")
    elif not isinstance(instance, Permission):
        record("user.deleted", {"user": instance.pk, "username": signable(username(instance))},
               subject=f"user:{instance.pk}")
    for pk in users:
        _record_user(pk)
    for pk in groups:
        _record_group(pk)
    for policy in Policy.objects.filter(pk__in=policies).select_related("agent"):
        record_policy(policy, "policy.changed")


def access_members_changed(sender, instance, action, reverse, model, pk_set, **kwargs) -> None:
    """m2m_changed of User.groups, User.user_permissions and Group.permissions, from either side.

    The entry is about the user (groups, permissions) or the group
    (permissions): from the other side (``group.user_set.add``,
    ``permission.group_set.clear()``) each one added or removed.
    """
    user_model = get_user_model()
    if sender is Group.permissions.through:
        owner_field, other_field, record_owner = "group", "permission", _record_group
    else:
        owner_field = user_model._meta.model_name
        other_field = "group" if sender is user_model.groups.through else "permission"
        record_owner = _record_user
    if reverse and action == "pre_clear":
        # pk_set is None at post_clear: who is about to lose the membership, now.
        instance._countersign_cleared = list(sender.objects.filter(**{f"{other_field}_id": instance.pk})
                                             .values_list(f"{owner_field}_id", flat=True))
        return
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if not reverse:
        owners = [instance.pk]
    else:
        owners = getattr(instance, "_countersign_cleared", []) if action == "post_clear" else sorted(pk_set or ())
    for pk in owners:
        record_owner(pk)
