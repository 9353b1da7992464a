"""Decision links in emails: minted as the email goes (only their digest kept), for its one reader, spent once.

A link decides nothing when followed: it opens a confirm page, after login,
showing what will be decided; the decision is taken when its reader posts
that page (``spend``), so a mail scanner that follows links decides
nothing. A link forwarded to someone else, used already, or past its
hours is refused with a code that says which.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.db import transaction
from knox.crypto import hash_token

from ..conf import settings
from ..models import DecisionLink, Interrupt
from ..protocol.schema.edits import approval_payload
from .notify.enqueue import link
from .refusals import Refusal

#: Characters of randomness in a link's token (URL-safe base64 of 32 bytes).
TOKEN_BYTES = 32
#: The path a link opens (``web.links``), the token after it.
PATH = "/decide/"
USED = "This link was used already: each works once. Open the request from your inbox to see what was decided."


def mint(user, wanted: list[tuple[Interrupt, tuple[str, ...]]], now) -> dict[int, dict[str, str]]:
    """For ``user``, a link per action (``DecisionLink.Action``) on each interrupt of ``wanted``: pk → action → URL.

    The tokens leave only in the returned URLs (the email); rows keep their digests.
    """
    rows, urls = [], {}
    expires = now + timedelta(hours=settings.COUNTERSIGN_DECISION_LINK_HOURS)
    for interrupt, actions in wanted:
        for action in actions:
            token = secrets.token_urlsafe(TOKEN_BYTES)
            rows.append(DecisionLink(digest=hash_token(token), user=user, interrupt=interrupt, action=action,
                                     expires_at=expires))
            urls.setdefault(interrupt.pk, {})[action] = link(f"{PATH}{token}/")
    DecisionLink.objects.bulk_create(rows)
    return urls


def find(token: str, user, now) -> DecisionLink:
    """The link ``token`` names, for ``user`` now; refused when it is unknown, someone else's, used or past."""
    found = (DecisionLink.objects.select_related("interrupt__run__agent", "interrupt__run__thread")
             .filter(digest=hash_token(token)).first()) if token.isascii() else None
    if found is None:
        raise Refusal("LINK_UNKNOWN", "This link is not one Countersign sent, or it was cut short: open the "
                                      "request from your inbox instead.", status=404)
    if found.user_id != user.pk:
        raise Refusal("LINK_NOT_YOURS", "This link was sent to someone else, and works only for them: open the "
                                        "request from your own inbox.", status=403)
    if found.used_at is not None:
        raise Refusal("LINK_USED", USED, status=410)
    if found.expires_at <= now:
        raise Refusal("LINK_EXPIRED", "This link has expired: open the request from your inbox.", status=410)
    return found


def spend(found: DecisionLink, now) -> None:
    """Use ``found`` up, or refuse LINK_USED when another request used it first (a second click, a replay)."""
    with transaction.atomic():
        if not DecisionLink.objects.filter(pk=found.pk, used_at__isnull=True).update(used_at=now):
            raise Refusal("LINK_USED", USED, status=410)


def unspend(found: DecisionLink, now) -> None:
    """Give back the use ``spend(found, now)`` took: the decision it was spent on was refused, nothing decided."""
    DecisionLink.objects.filter(pk=found.pk, used_at=now).update(used_at=None)


def approve_on_card(interrupt: Interrupt, rule) -> str:
    """Why approving ``interrupt`` under ``rule`` happens on its card, not from a link (in words), or "".

    Its passkey signs an approval only on the card, and a form asks for more than a yes.
    """
    if rule.require_passkey:
        return "with your passkey"
    if approval_payload(interrupt.response_schema, True) is None:
        return "where its form asks for more"
    return ""
