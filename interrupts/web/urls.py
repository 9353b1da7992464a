from django.urls import path

from . import bulk, views
from . import insight
from . import notifications

urlpatterns = [
    path("", views.home, name="home"),
    path("inbox/", views.inbox, name="inbox"),
    path("interrupts/<int:pk>/decide/", views.decide, name="decide"),
    path("interrupts/<int:pk>/preview/", views.edit_preview, name="edit-preview"),
    path("interrupts/<int:pk>/undo/", views.undo, name="undo"),
    path("interrupts/bulk-decide/", bulk.bulk_decide, name="bulk-decide"),
    path("interrupts/<int:pk>/claim/", views.claim, {"how": "claim"}, name="claim"),
    path("interrupts/<int:pk>/take-over/", views.claim, {"how": "take-over"}, name="claim-take-over"),
    path("interrupts/<int:pk>/release/", views.claim, {"how": "release"}, name="claim-release"),
    path("runs/<int:pk>/retry/", views.retry_run, name="retry-run"),
    path("runs/<int:pk>/cancel/", views.cancel_run, name="cancel-run"),
    # An answer the agent refused: one view, one door per way of settling it.
    path("runs/<int:pk>/resend/", views.settle_run, {"how": "resend"}, name="settle-resend"),
    path("runs/<int:pk>/reopen/", views.settle_run, {"how": "reopen"}, name="settle-reopen"),
    path("runs/<int:pk>/close/", views.settle_run, {"how": "close"}, name="settle-close"),
    path("threads/", views.threads, name="threads"),
    path("threads/start/", views.start_run, name="start-thread"),
    path("threads/<str:thread_id>/", views.thread_detail, name="thread"),
    path("threads/<str:thread_id>/events/", views.thread_events, name="thread-events"),
    path("threads/<str:thread_id>/runs/", views.start_run, name="start-run"),
    path("threads/<str:thread_id>/audit/", views.audit, name="thread-audit"),
    path("audit/", views.audit, name="audit"),
    path("insight/", insight.page, name="insight"),
    path("insight/export.csv", insight.export, {"kind": "csv"}, name="insight-export-csv"),
    path("insight/export.json", insight.export, {"kind": "json"}, name="insight-export-json"),
    path("registry/", views.agents, name="agents"),
    path("registry/add/", views.agent_edit, name="agent-add"),
    path("registry/<slug:name>/edit/", views.agent_edit, name="agent-edit"),
    path("registry/<slug:name>/rotate-secret/", views.agent_rotate_secret, name="agent-rotate-secret"),
    path("policies/add/", views.policy_edit, name="policy-add"),
    path("policies/<int:pk>/edit/", views.policy_edit, name="policy-edit"),
    path("policies/<int:pk>/delete/", views.policy_delete, name="policy-delete"),
    path("webhooks/", notifications.webhooks, name="webhooks"),
    path("webhooks/deliveries/", notifications.deliveries, name="deliveries"),
    path("webhooks/deliveries/<int:pk>/resend/", notifications.resend, name="delivery-resend-page"),
    path("settings/notifications/", notifications.preferences, name="notification-settings"),
]
