"""Whether a socket's user may still read, and the signals that say it may have changed.

Reading takes a live session of an active user whose password has not changed since it began;
docs/internals/live.md says why groups close no socket and how a change reaches every process.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.models import Session
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from . import relay


def check(user_pk, session_key: str | None):
    """``(user, session expiry)`` while ``session_key`` lets ``user_pk`` read, else None.

    The user is read afresh: a socket keeps it as its current one (staff or
    not), not as it was when the socket connected.
    """
    if not session_key:
        return None
    session = Session.objects.filter(session_key=session_key, expire_date__gt=timezone.now()).first()
    if session is None:
        return None
    data = session.get_decoded()
    user = get_user_model().objects.filter(pk=user_pk, is_active=True).first()
    if user is None or data.get(SESSION_KEY) != user._meta.pk.value_to_string(user):
        return None
    # As django.contrib.auth.get_user judges it: a changed password ends every older session.
    stored = data.get(HASH_SESSION_KEY) or ""
    if not any(constant_time_compare(stored, known) for known in
               (user.get_session_auth_hash(), *user.get_session_auth_fallback_hash())):
        return None
    return user, session.expire_date


def _user_pk(value):
    try:
        return get_user_model()._meta.pk.to_python(value)
    except Exception:  # a session written by something else: nobody's
        return None


# --- signal receivers (connected in interrupts/apps.py) ---------------------------------


def session_deleted(sender, instance: Session, **kwargs) -> None:
    """A logout (any process), a session an admin deleted: its user's sockets check again."""
    if instance.expire_date <= timezone.now():
        return  # an expired one (clearsessions): its sockets closed when it expired
    user_pk = _user_pk(instance.get_decoded().get(SESSION_KEY))
    if user_pk is not None:
        relay.standing_changed(user_pk)


def user_saved(sender, instance, created: bool = False, update_fields=None, **kwargs) -> None:
    """Deactivated, password changed, made staff or not: the user's sockets check again (and take the new user)."""
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return  # a login stamps last_login: nothing a socket depends on
    relay.standing_changed(instance.pk)


def user_deleted(sender, instance, **kwargs) -> None:
    relay.standing_changed(instance.pk)


def expires_in(until: datetime) -> float:
    """Seconds from now until ``until`` (none if past)."""
    return max(0.0, (until - timezone.now()).total_seconds())
