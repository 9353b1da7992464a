"""What the refund agents of tests/external share: their command line, ``/executed``, ``/health`` and serving.

Each agent (``<name>_agent.py``) builds its framework's app and calls
``main``; it runs in its framework's own venv, so this module uses only the
standard library, uvicorn and starlette, which every one of those venvs has.

    .venv-<name>/bin/python tests/external/<name>_agent.py --port N [--record FILE]

It prints ``ready on http://127.0.0.1:PORT`` once listening. Each time the
agent's tool really runs it calls ``record``: ``GET /executed`` answers
``{"executed": [...]}`` in order, and ``--record FILE`` appends the same as
JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

HOST = "127.0.0.1"

executed: list[dict] = []
_record_to: str | None = None


def record(done: dict) -> None:
    """One real execution of the tool, with the args it ran with."""
    executed.append(done)
    if _record_to:
        with open(_record_to, "a") as out:
            out.write(json.dumps(done) + "\n")


async def _executed(request: Request) -> JSONResponse:
    return JSONResponse({"executed": executed})


async def _health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def _serve(app: Starlette, port: int) -> None:
    # A second is enough to finish a stream at SIGTERM: the tests wait for the process.
    server = uvicorn.Server(uvicorn.Config(app, host=HOST, port=port, log_level="warning", timeout_graceful_shutdown=1))
    # The readiness line comes once the socket listens, not before.
    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():
        await asyncio.sleep(0.05)
    if server.started:
        print(f"ready on http://{HOST}:{port}", flush=True)
    await serving


def main(build: Callable[[], Starlette], *, doc: str, port: int) -> None:
    """Parse the command line, build the agent's app (a Starlette or FastAPI app) and serve it until SIGTERM."""
    global _record_to
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--record", help="append each execution of the tool to this file, as JSON lines")
    args = parser.parse_args()
    _record_to = args.record
    app = build()
    # Ahead of the framework's own routes, whichever paths those claim.
    app.router.routes[:0] = [Route("/executed", _executed, methods=["GET"]), Route("/health", _health, methods=["GET"])]
    asyncio.run(_serve(app, args.port))
