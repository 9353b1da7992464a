from django.utils.functional import SimpleLazyObject

from .. import conf
from ..reads import selectors

# What templates may say of the app's limits ({{ limits.MAX_COMMENT_CHARS }}), read from conf.
LIMITS = {name: getattr(conf, name) for name in dir(conf)
          if name.startswith(("MAX_", "API_")) or name in ("ACTIONS", "GRANT_HOURS", "SIMULATION_DAYS")}


def limits(request):
    """The app's limits, as forms and services enforce them (interrupts.conf), for a field's maxlength."""
    return {"limits": LIMITS}


def header(request):
    """The count every page's header shows (and keeps live): the interrupts waiting for this user."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    known = getattr(request, "pending_count", None)  # the unfiltered inbox has just counted them
    if known is not None:
        return {"pending_count": known, "presence_seconds": conf.settings.COUNTERSIGN_PRESENCE_SECONDS}
    # Lazy: counted once, and only by a page that shows it.
    return {"pending_count": SimpleLazyObject(
        lambda: selectors.waiting(request.user, selectors.policies_in_force(request))),
        # How often presence.js renews "I have this card open" (a third of it).
        "presence_seconds": conf.settings.COUNTERSIGN_PRESENCE_SECONDS}
