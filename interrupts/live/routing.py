"""WebSocket routes, mounted by project/asgi.py behind session login and origin checks."""

from django.urls import path

from . import consumers

websocket_urlpatterns = [
    path("ws/inbox/", consumers.InboxConsumer.as_asgi()),
    path("ws/threads/<str:thread_id>/", consumers.ThreadConsumer.as_asgi()),
]
