"""WebSocket routes, mounted by project/asgi.py behind login and origin checks.

The live inbox and thread consumers register here (consumers.py).
"""

websocket_urlpatterns: list = []
