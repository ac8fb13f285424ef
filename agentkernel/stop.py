"""A stop flag that any thread can set and the loop can await."""

from __future__ import annotations

import asyncio
import threading


class StopSignal:
    """Thread-safe "please stop" flag.

    ``set()`` may be called from any thread (a widget click handler, a timer, a SIGINT handler); it wakes
    every ``wait()`` on its own event loop through ``call_soon_threadsafe``.
    """

    def __init__(self) -> None:
        self._flag = threading.Event()
        # Reentrant: a SIGINT handler calling set() runs on the loop's own thread, possibly while wait() holds it.
        self._lock = threading.RLock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.reason = "aborted by user"

    def set(self, reason: str = "aborted by user") -> None:
        with self._lock:
            if not self._flag.is_set():
                self.reason = reason
            self._flag.set()
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed: nobody is waiting there any more
                pass

    def is_set(self) -> bool:
        return self._flag.is_set()

    async def wait(self) -> None:
        """Return once the signal is set."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            self._waiters.append(entry)
        try:
            if not self._flag.is_set():  # checked after registering, so a set() in between is never missed
                await event.wait()
        finally:
            with self._lock:
                self._waiters.remove(entry)
