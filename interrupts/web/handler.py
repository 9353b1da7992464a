"""Django's ASGI handler, running each request's middleware and view on a kept thread in one hop.

Django runs a request's synchronous code (middleware, views, the ORM) on a
thread of the request's own, so that code which must stay on one thread does.
Two costs came with it on this stack, where every middleware and nearly every
view is synchronous (measured with py-spy on a served 404, about half the
server's time):

- asgiref starts that thread for each request and, when the request ends, a
  second one to join it, and the request opens a database connection of its
  own. Here the thread is an executor of one worker that goes back to a free
  list when its request ends: asgiref's ``ThreadSensitiveContext`` takes one
  for exactly this (``executor=``, owned by the caller).
- Django's async chain calls each middleware's hooks on that thread one by
  one, a round trip between the thread and the event loop for each (about
  ten a request). Here the chain is built synchronous, as under WSGI, and
  runs in one trip; an async view (the AG-UI gateway) is awaited on the
  event loop from it, as Django does for one under WSGI.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.db import close_old_connections
from django.http import FileResponse

from ..conf import REQUEST_THREADS_KEPT


class RequestThreads:
    """Single-thread executors that no request is using; used only from the event loop's thread."""

    def __init__(self, kept: int = REQUEST_THREADS_KEPT) -> None:
        self.kept = kept
        self.idle: list[ThreadPoolExecutor] = []

    def take(self) -> ThreadPoolExecutor:
        # The most recently used: its thread and its connection are the likeliest to be warm.
        if self.idle:
            return self.idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="countersign-request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        if len(self.idle) < self.kept:
            self.idle.append(executor)
        else:  # past a burst: the thread ends once idle, without the loop waiting for it
            executor.shutdown(wait=False)


class KeptThreadsHandler(ASGIHandler):
    """``ASGIHandler`` whose requests run their synchronous code on kept threads, one request at a time each."""

    threads = RequestThreads()

    def __init__(self) -> None:
        BaseHandler.__init__(self)
        self.load_middleware(is_async=False)  # not ASGIHandler's async chain (above)

    def answer(self, request):
        """``get_response``; an answer that streams gives back its request's pooled connections first.

        Django gives them back when the request ends (``request_finished``),
        which for a stream is when it ends: an AG-UI run's through the gateway,
        minutes later. As many runs streaming as the pool has connections
        (COUNTERSIGN_DB_POOL_SIZE) held them all, and every other request
        waited for one until refused. What the stream reads later takes a
        connection then.
        """
        response = self.get_response(request)
        if response.streaming:
            close_old_connections()  # as at request_finished: pooled ones go back, SQLite's stay
        return response

    async def run_get_response(self, request):
        response = await sync_to_async(self.answer, thread_sensitive=True)(request)
        # As ASGIHandler.run_get_response does after its async chain.
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        return response

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)  # Django's refusal
        executor = self.threads.take()
        async with ThreadSensitiveContext(executor=executor):
            await self.handle(scope, receive, send)
        # Only after a request that ended: one cancelled or failed may have left work on
        # its thread, which then ends on its own rather than delaying someone else's.
        self.threads.give_back(executor)
