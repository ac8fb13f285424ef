"""How long the tests give the code, and how they wait for something to happen: on a condition, polled with a
deadline, never a bare sleep (a loaded machine makes any fixed sleep too short)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

STOP_BOUND = 0.5
"""Seconds from a Stop click to the cell going idle where nothing must be cut first (measured ~0.01-0.05 s)."""
STOP_BOUND_BUSY = 1.0
"""Seconds from Stop (or a ``--max-seconds`` deadline) to the cell going idle while work must be cut first: code
``run_python`` runs, an MCP or a served call, a browser's round trip."""
POLL = 0.02


def wait_until(condition: Callable[[], object], what: str, within: float = 30.0) -> None:
    """Return as soon as ``condition()`` is true; AssertionError naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {within:g} s"
        time.sleep(POLL)


async def until(condition: Callable[[], object], what: str, within: float = 30.0) -> None:
    """:func:`wait_until` on a running event loop, which goes on meanwhile."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {within:g} s"
        await asyncio.sleep(POLL)
