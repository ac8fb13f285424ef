"""Tool-call timeouts: one timer for all the calls of a run."""

from __future__ import annotations

import asyncio
from typing import Any


class Timeouts:
    """Cancels the task of a tool call that runs past its timeout, with one timer for any number of calls.

    A timer per call (what ``asyncio.timeout`` makes) costs more than a quick tool's whole call, and nearly every
    call ends long before its timeout. Here one timer waits for the earliest expiry; when it fires, it cancels the
    calls that ran out of time and waits for the next expiry. A run keeps one for all its calls; :meth:`close` it
    when the run ends.

    Not ``asyncio.timeout(None)`` per call either, expired by this timer: it was measured (2026-12-01) at 3.1 µs a
    call against 1.3 µs for :func:`~agentkernel.tools.runner.invoke`'s own bookkeeping, about 4 µs of a 65 µs
    round of ``benchmarks/loop_overhead.py``. (The run's Stop and wall clock, one per run, are ``asyncio.timeout``.)
    """

    def __init__(self) -> None:
        self._running: dict[asyncio.Task[Any], float] = {}  # a task runs one call at a time: its expiry
        self._expired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def current_task(self) -> asyncio.Task[Any]:
        """The task running now, on the event loop this object last saw.

        ``asyncio.current_task()`` asks the system for the process id (``asyncio.get_running_loop()`` does, each
        time): a system call per tool call, saved by remembering the loop. A task not found there means another
        loop runs now (a runner used from a second ``asyncio.run``): it is looked up, and the old loop's timer
        dropped.
        """
        task = None if self._loop is None else asyncio.current_task(self._loop)
        if task is None:
            self.close()
            self._loop = asyncio.get_running_loop()
            task = asyncio.current_task(self._loop)
            assert task is not None, "a tool call runs in a task"
        return task

    def watch(self, task: asyncio.Task[Any], seconds: float) -> None:
        """Cancel ``task`` in ``seconds`` unless :meth:`release` comes first."""
        loop = self._loop if self._loop is not None else asyncio.get_running_loop()
        when = loop.time() + seconds
        self._running[task] = when
        if self._timer is None or when < self._timer.when():
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(when, self._expire)

    def release(self, task: asyncio.Task[Any]) -> bool:
        """Stop watching ``task``; whether it ran out of time (and was cancelled for that)."""
        self._running.pop(task, None)
        if task in self._expired:
            self._expired.remove(task)
            return True
        return False

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None

    def _expire(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = None
        now = loop.time()
        for task, when in list(self._running.items()):
            if when <= now:
                del self._running[task]
                self._expired.add(task)
                task.cancel()
        if self._running:  # (an expiry a hair in the future, within the clock's resolution, comes round again)
            self._timer = loop.call_at(min(self._running.values()), self._expire)
