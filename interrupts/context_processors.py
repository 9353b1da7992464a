from . import selectors


def header(request):
    """The pending count every page's header shows (and keeps live)."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    return {"pending_count": selectors.pending_count()}
