"""ASGI entry point: HTTP through Django, WebSockets through Channels.

WebSockets get the same login as pages (session auth) and refuse a foreign
Origin, so a page on another site cannot open a socket with a reviewer's
cookies.
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

# Django must be set up before anything imports models (the consumers do).
django.setup(set_prefix=False)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from interrupts.hub.replies import AfterReply  # noqa: E402
from interrupts.live.routing import websocket_urlpatterns  # noqa: E402
from interrupts.web import csp  # noqa: E402
from interrupts.web.handler import KeptThreadsHandler  # noqa: E402

# Django's handler (what get_asgi_application returns), keeping its request threads.
django_asgi_app = KeptThreadsHandler()

application = ProtocolTypeRouter(
    {
        # Even a response Django makes before its middleware runs carries the policy;
        # a decision counts once its answer has left (hub/replies.py).
        "http": csp.everywhere(AfterReply(django_asgi_app)),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
