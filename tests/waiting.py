"""Waiting on a state, not on a clock, from a test running on an event loop.

tests/e2e/conftest.py's wait_for is the blocking one.
"""

import asyncio
import inspect


async def until(check, timeout: float = 10.0, every: float = 0.02):
    """Await ``check()`` (a plain or an async callable) until it returns something truthy; fail after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert loop.time() < deadline, f"timed out waiting for {getattr(check, '__name__', check)}"
        await asyncio.sleep(every)  # the poll's pace, not a guess at how long the state takes
