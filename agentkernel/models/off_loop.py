"""A model's HTTP stream read on a thread of its own, so that a cell that blocks the kernel's event loop does not
stall it.

A background run's loop lives on the kernel's event loop, which a user's cell that blocks (``time.sleep``, a long
pandas call) holds for as long as it runs. :class:`OffLoopModel` runs the wrapped model's ``stream(request)`` on
one event loop in a daemon thread (``agentkernel model I/O``, shared by every such model of the process) and hands
each event to the caller's loop: the response keeps being read while the kernel's loop is held, and the run
takes it up where it is when the cell ends. Closing the stream (Stop, a budget) cancels the reading task there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import AsyncGenerator
from typing import Any

from ._api import ApiModel
from .base import ModelEvent, ModelRequest

BATCH = 8
"""Events handed on between two passes of the caller's event loop."""
_lock = threading.Lock()
_io: asyncio.AbstractEventLoop | None = None


def io_loop() -> asyncio.AbstractEventLoop:
    """The process's model I/O loop, started in its daemon thread on first use."""
    global _io
    with _lock:
        if _io is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agentkernel model I/O", daemon=True).start()
            _io = loop
        return _io


def reads_a_network(model: object) -> bool:
    """Whether ``model`` (or the model a cassette records) streams from an SDK client it made itself: such a model
    can be moved to another event loop (a client handed in may be tied to the kernel's)."""
    inner = getattr(model, "inner", model)
    return isinstance(inner, ApiModel) and inner._own_client


class OffLoopModel:
    """``inner`` with its stream read on the model I/O thread (see the module); everything else is ``inner``'s."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)

    def __getattr__(self, name: str) -> Any:  # max_output_tokens, accepts_images, discover_context_window, ...
        return getattr(self.inner, name)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        here = asyncio.get_running_loop()
        pending: collections.deque[tuple[str, Any]] = collections.deque()
        ready = asyncio.Event()

        def hand(kind: str, value: Any) -> None:  # on the I/O thread: one wake-up per batch, not per event
            pending.append((kind, value))
            if len(pending) == 1:
                with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody reads any more
                    here.call_soon_threadsafe(ready.set)

        async def read() -> None:
            try:
                async with contextlib.aclosing(self.inner.stream(request)) as events:
                    async for event in events:
                        hand("event", event)
                        time.sleep(0)  # lets the kernel's main thread take the GIL now, not at the next switch
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # noqa: BLE001 - the caller's loop raises it, where the run decides
                hand("error", error)
            else:
                hand("end", None)

        reading = asyncio.run_coroutine_threadsafe(read(), io_loop())
        try:
            while True:
                await ready.wait()
                ready.clear()
                handed = 0
                while pending:
                    kind, value = pending.popleft()
                    if kind == "event":
                        yield value
                        handed += 1
                        if handed % BATCH == 0:  # a fast stream leaves the loop to the user's cells between batches
                            await asyncio.sleep(0)
                    elif kind == "end":
                        return
                    else:
                        raise value
        finally:
            reading.cancel()  # the stream was closed early (Stop, a budget): the request is dropped there
