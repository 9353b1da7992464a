"""``manage.py serve``: daphne (HTTP + WebSocket) and, on its event loop, this process's supervisor."""

# Daphne has no start-up hook and the in-memory channel layer does not cross processes,
# so the process that serves requests also owns the background work (ready_callable).

import asyncio
import logging

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from interrupts.demo import register_demo_agents
from interrupts.hub.supervisor import Supervisor

logger = logging.getLogger("interrupts.serve")


class Command(BaseCommand):
    help = "Serve Countersign over HTTP and WebSocket with daphne."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="Interface to listen on.")
        parser.add_argument("--port", type=int, default=8000, help="TCP port to listen on.")
        parser.add_argument(
            "--proxy-headers",
            action="store_true",
            help="Trust X-Forwarded-For/-Port/-Proto from a reverse proxy in front.",
        )

    def handle(self, *args, host, port, proxy_headers, verbosity, **options):
        if not 0 < port < 65536:
            raise CommandError(f"--port {port} is not a TCP port (1–65535).")
        # Imported here: daphne.server installs Twisted's asyncio reactor on import.
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        _leave_forms_to_django()

        from project.asgi import application

        display_host = f"[{host}]" if ":" in host else host
        base_url = f"http://{display_host}:{port}"
        # The demo agents are served by this very process: point them here.
        connect_host = "127.0.0.1" if host in ("0.0.0.0", "::") else display_host
        settings.COUNTERSIGN_SELF_URL = f"http://{connect_host}:{port}"
        register_demo_agents(settings.COUNTERSIGN_SELF_URL)
        close_old_connections()

        def ready():
            # Called before daphne runs its loop: start the supervisor on that
            # loop as soon as it turns.
            asyncio.get_event_loop().call_soon(lambda: Supervisor().start())
            self.stdout.write(f"Countersign listening on {base_url}/", ending="\n")
            self.stdout.flush()

        server = Server(
            application=application,
            endpoints=build_endpoint_description_strings(host=host, port=port),
            ready_callable=ready,
            verbosity=verbosity,
            proxy_forwarded_address_header="X-Forwarded-For" if proxy_headers else None,
            proxy_forwarded_port_header="X-Forwarded-Port" if proxy_headers else None,
            proxy_forwarded_proto_header="X-Forwarded-Proto" if proxy_headers else None,
        )
        server.run()


def _leave_forms_to_django() -> None:
    """Make daphne's requests leave form bodies unparsed, for Django to read (and refuse) itself."""
    # Twisted answers a broken multipart body with a bare "400 Bad Request" of its own (no
    # {code, detail}), and Django reads the body again anyway: ours is daphne's request with
    # Twisted's public switch for that parsing off, installed where HTTPFactory builds each one.
    from daphne import http_protocol, server

    class WebRequest(http_protocol.WebRequest):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, parsePOSTFormSubmission=False, **kwargs)

    class HTTPFactory(http_protocol.HTTPFactory):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # Twisted's idle timeout covers reading a request (it is lifted once
            # the body is in, so long streams and WebSockets are not cut) and a
            # kept-alive connection between requests; daphne leaves it at
            # Twisted's 12 hours, so a client trickling a body held a connection
            # that long.
            self.timeOut = settings.COUNTERSIGN_HTTP_IDLE_TIMEOUT

        def buildProtocol(self, addr):
            protocol = super().buildProtocol(addr)
            protocol.requestFactory = WebRequest
            return protocol

    server.HTTPFactory = HTTPFactory  # what Server.run() builds its factory from
