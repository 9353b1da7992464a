from django.contrib.auth.decorators import login_required
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from . import audit, insight, metrics, notifications, views


class Router(DefaultRouter):
    # No ".json" suffix routes: the API reads and writes JSON only, and the
    # viewsets' actions take no format argument (each suffix route was a 500).
    include_format_suffixes = False


router = Router()
router.register("agents", views.AgentViewSet, basename="agent")
router.register("threads", views.ThreadViewSet, basename="thread")
router.register("interrupts", views.InterruptViewSet, basename="interrupt")
router.register("policies", views.PolicyViewSet, basename="policy")
router.register("grants", views.GrantViewSet, basename="grant")
router.register("webhooks", notifications.WebhookViewSet, basename="webhook")

urlpatterns = [
    path("", include(router.urls)),
    path("runs/<str:run_id>/", views.RunDetail.as_view(), name="run-detail"),
    path("runs/<str:run_id>/retry/", views.RetryRun.as_view(), name="run-retry"),
    path("runs/<str:run_id>/cancel/", views.CancelRun.as_view(), name="run-cancel"),
    path("runs/<str:run_id>/resend/", views.ResendRun.as_view(), name="run-resend"),
    path("runs/<str:run_id>/reopen/", views.ReopenRun.as_view(), name="run-reopen"),
    path("runs/<str:run_id>/close/", views.CloseRun.as_view(), name="run-close"),
    path("metrics/", metrics.Metrics.as_view(), name="metrics"),
    path("deliveries/", notifications.DeliveryList.as_view(), name="delivery-list"),
    path("deliveries/<int:pk>/", notifications.DeliveryDetail.as_view(), name="delivery-detail"),
    path("deliveries/<int:pk>/resend/", notifications.ResendDelivery.as_view(), name="delivery-resend"),
    path("me/notifications/", notifications.MyNotifications.as_view(), name="my-notifications"),
    path("insight/", insight.Insight.as_view(), name="insight-api"),
    path("audit/export/", audit.AuditExport.as_view(), name="audit-export"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # A page for people: anonymous visitors go to the login page, like every page.
    path("docs/", login_required(SpectacularSwaggerSplitView.as_view(url_name="api-schema")), name="api-docs"),
]
