from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path

from interrupts import gateway
from interrupts.api.errors import NoSuchEndpoint
from interrupts.api.metrics import Metrics
from interrupts.web import accounts

urlpatterns = [
    path("admin/", admin.site.urls),
    # Not django.contrib.auth.urls: its password reset would let anyone make
    # the server send mail, and there is no mail set-up. Staff reset passwords
    # in the admin.
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", accounts.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password_change/done/", auth_views.PasswordChangeDoneView.as_view(),
         name="password_change_done"),
    path("agents/", include("interrupts.demo.urls")),
    path("agui/<slug:agent>/", gateway.agui, name="agui"),
    # Machines' doors answer JSON even for a path nothing serves (Django's 404 page is HTML).
    re_path(r"^agui/", gateway.no_such_endpoint),
    # Where Prometheus looks by default (its metrics_path): the same door as /api/metrics/.
    # Left out of the API schema: it is the documented /api/metrics/, at another address.
    path("metrics", Metrics.as_view(schema=None), name="metrics-root"),
    path("api/", include("interrupts.api.urls")),
    re_path(r"^api/", NoSuchEndpoint.as_view()),
    path("", include("interrupts.web.urls")),
]
