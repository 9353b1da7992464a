"""Ending a person's sessions: "log out everywhere".

Django's logout ends the session it is made with; a person who left a
browser logged in elsewhere (a shared machine, a lost laptop) ends them all
here. Each deleted session closes the sockets opened with it, in every
process (``live.standing``). A password change and deactivation end every
session already, through Django's session hash and ``is_active``.
"""

from __future__ import annotations

from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone


def end_all(user) -> int:
    """Delete every live session of ``user``; how many there were.

    Sessions are stored by key, not by user: each live one is decoded to
    find its owner, a read of the whole table that a team's few hundred
    sessions make cheap.
    """
    owner = user._meta.pk.value_to_string(user)
    keys = [session.session_key for session in
            Session.objects.filter(expire_date__gt=timezone.now()).only("session_key", "session_data").iterator()
            if session.get_decoded().get(SESSION_KEY) == owner]
    with transaction.atomic(durable=True):
        deleted, _ = Session.objects.filter(session_key__in=keys).delete()
    return deleted
