"""A stop flag that any thread can set and the loop can await or subscribe to."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

Waiter = tuple[asyncio.AbstractEventLoop, Callable[[], None]]


class StopSignal:
    """Thread-safe "please stop" flag.

    ``set()`` may be called from any thread (a widget click handler, a timer, a SIGINT handler); it runs every
    subscriber's callback on that subscriber's own event loop through ``call_soon_threadsafe``.
    """

    def __init__(self) -> None:
        self._flag = threading.Event()
        # Reentrant: a SIGINT handler calling set() runs on the loop's own thread, possibly while subscribe() holds it.
        self._lock = threading.RLock()
        self._waiters: list[Waiter] = []
        self.reason = "aborted by user"

    def set(self, reason: str = "aborted by user") -> None:
        with self._lock:
            if not self._flag.is_set():
                self.reason = reason
            self._flag.set()
            waiters = list(self._waiters)
        for loop, callback in waiters:
            try:
                loop.call_soon_threadsafe(callback)
            except RuntimeError:  # that loop is closed: nobody is waiting there any more
                pass

    def is_set(self) -> bool:
        return self._flag.is_set()

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` on the running event loop once the signal is set (soon, if it already is).

        Returns the function that unsubscribes; a callback already on its way may still run after it, so the
        callback checks whether it is still wanted.
        """
        waiter = (asyncio.get_running_loop(), callback)
        with self._lock:
            self._waiters.append(waiter)
            already = self._flag.is_set()  # checked after subscribing, so a set() in between is never missed
        if already:
            waiter[0].call_soon(callback)

        def unsubscribe() -> None:
            with self._lock:
                self._waiters.remove(waiter)

        return unsubscribe

    async def wait(self) -> None:
        """Return once the signal is set."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        unsubscribe = self.subscribe(wake)
        try:
            await woken
        finally:
            unsubscribe()
