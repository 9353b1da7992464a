"""Logging out: of this browser, or of every browser at once."""

from django.contrib.auth import views as auth_views

from ..hub import sessions


class LogoutView(auth_views.LogoutView):
    """Django's logout; with ``everywhere`` posted, every other session of the person ends too."""

    def post(self, request, *args, **kwargs):
        if request.POST.get("everywhere") and request.user.is_authenticated:
            sessions.end_all(request.user)
        return super().post(request, *args, **kwargs)
