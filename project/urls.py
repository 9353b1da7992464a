from django.contrib import admin
from django.urls import include, path

from interrupts import gateway

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("agents/", include("interrupts.demo.urls")),
    path("agui/<slug:agent>/", gateway.agui, name="agui"),
    path("api/", include("interrupts.api.urls")),
    path("", include("interrupts.urls")),
]
