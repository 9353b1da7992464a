from django.contrib import admin
from django.urls import include, path, re_path

from interrupts import gateway
from interrupts.api.errors import NoSuchEndpoint

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("agents/", include("interrupts.demo.urls")),
    path("agui/<slug:agent>/", gateway.agui, name="agui"),
    # Machines' doors answer JSON even for a path nothing serves (Django's 404 page is HTML).
    re_path(r"^agui/", gateway.no_such_endpoint),
    path("api/", include("interrupts.api.urls")),
    re_path(r"^api/", NoSuchEndpoint.as_view()),
    path("", include("interrupts.urls")),
]
