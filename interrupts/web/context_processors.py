from django.utils.functional import SimpleLazyObject

from ..reads import selectors


def header(request):
    """The count every page's header shows (and keeps live): the interrupts waiting for this user."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    known = getattr(request, "pending_count", None)  # the unfiltered inbox has just counted them
    if known is not None:
        return {"pending_count": known}
    # Lazy: counted once, and only by a page that shows it.
    return {"pending_count": SimpleLazyObject(lambda: selectors.waiting_count(request.user))}
