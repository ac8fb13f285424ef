"""Tool-call timeouts: one timer for all the calls of a run."""

from __future__ import annotations

import asyncio


class Timeouts:
    """Expires each call's ``asyncio.timeout`` when the call runs past its time, with one timer for any number of
    calls.

    A call runs inside ``asyncio.timeout(None)`` (which cancels its task when it expires, turns that cancellation
    into ``TimeoutError`` and tells it apart from anyone else's); :meth:`watch` gives it its expiry. Not
    ``asyncio.timeout(seconds)``: that is a timer per call, which costs more than a quick tool's whole call, and nearly
    every call ends long before its timeout. Here one timer waits for the earliest expiry; when it fires, it expires
    the calls that ran out of time and waits for the next. A run keeps one for all its calls; :meth:`close` it when
    the run ends.
    """

    def __init__(self) -> None:
        self._running: dict[asyncio.Timeout, float] = {}  # a call's scope: its expiry
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, scope: asyncio.Timeout, seconds: float) -> None:
        """Expire ``scope`` (an entered ``asyncio.timeout(None)``) in ``seconds`` unless :meth:`release` comes
        first."""
        loop = asyncio.get_running_loop()
        when = loop.time() + seconds
        self._running[scope] = when
        if self._timer is None or when < self._timer.when():
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(when, self._expire)

    def release(self, scope: asyncio.Timeout) -> None:
        """Stop watching ``scope`` (its call ended)."""
        self._running.pop(scope, None)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = None
        now = loop.time()
        for scope, when in list(self._running.items()):
            if when <= now:
                del self._running[scope]
                scope.reschedule(now)  # expires it at once: asyncio cancels the call's task
        if self._running:  # (an expiry a hair in the future, within the clock's resolution, comes round again)
            self._timer = loop.call_at(min(self._running.values()), self._expire)
