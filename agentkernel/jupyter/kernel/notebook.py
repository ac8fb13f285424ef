"""The kernel's end of the ``agentkernel.notebook`` comm: asking agentkernel's JupyterLab / Notebook 7 extension
to read the notebook, insert a cell or replace a cell's source.

The kernel opens the comm with its first request (``hello``); the front end answers each request on the same
comm with the same ``request_id``. Replies are comm messages on the shell channel, which ipykernel >= 7.4
dispatches while the ``%%agent`` cell awaits (DESIGN.md), so a request awaits a future that the comm's message
handler settles through ``call_soon_threadsafe`` (it may run on another thread, a kernel subshell's). Every wait
is short: where no extension answers (VS Code, Colab, nbclient, papermill, terminal IPython) the ``hello`` ends
after :data:`HELLO_TIMEOUT` seconds, and that silence is kept for the kernel's client session, so a headless run
pays it at most once per kernel; a hello that failed otherwise (an error, a reply that is not agentkernel's, a
closed comm) cost nothing and is tried again in the next run::

    bridge = NotebookBridge.of(shell)
    front_end = await bridge.connect()       # None: no extension answered (bridge.absent says why)
    reply = await bridge.request("read")     # {"ok": True, "path": ..., "cells": [...]}

Replies nobody waits for (late ones, or a hostile front end's junk) cost the kernel no more than reading them: they
schedule nothing on the event loop, and the ``comm`` package's warning for a message to a comm that is closed
(which ipykernel writes to the cell's stderr, waiting for its IO thread each time) is dropped for ours.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cells import FrontEnd

COMM_TARGET = "agentkernel.notebook"
HELLO_TIMEOUT = 2.0
"""Seconds the kernel waits for the extension's ``hello`` before it takes the front end to have none."""
REQUEST_TIMEOUT = 5.0
"""Seconds a read, insert or replace may take before the front end is taken to be gone."""


CLOSED_KEPT = 1000
"""How many of the comms this module closed are remembered, to drop the warnings of messages sent to them."""


class NotebookUnavailable(Exception):
    """No front end answers the comm (or it stopped answering): the message says which."""


class NoAnswer(NotebookUnavailable):
    """Nothing came back in time (no extension is there, or it stopped answering)."""


class LateReplies(logging.Filter):
    """Drops the ``comm`` package's "No such comm" warning for messages to the comms :class:`NotebookBridge` closed
    (measured: each such warning cost the kernel about 1 ms of CPU and a wait for ipykernel's IO thread, 2,000 of
    them about half of all the kernel did for them; on a loaded machine the waits made it about a minute)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed: dict[str, None] = {}  # an ordered set: the newest CLOSED_KEPT ids
        self.dropped = 0

    def add(self, comm_id: str) -> None:
        self.closed[comm_id] = None
        if len(self.closed) > CLOSED_KEPT:
            del self.closed[next(iter(self.closed))]

    def filter(self, record: logging.LogRecord) -> bool:
        comm_id = record.args[0] if isinstance(record.args, tuple) and record.args else None
        if record.msg == "No such comm: %s" and isinstance(comm_id, str) and comm_id in self.closed:
            self.dropped += 1
            return False
        return True


LATE_REPLIES = LateReplies()
logging.getLogger("Comm").addFilter(LATE_REPLIES)  # the comm package's logger


@dataclass
class ExecuteRequest:
    """What the running cell's execute request says about where it runs."""

    cell_id: str = ""
    """The nbformat id of the running cell (JupyterLab and Notebook 7 send it as ``metadata.cellId``)."""
    code: str = ""
    session: str = ""
    """The client session that sent it (a reloaded page is a new one)."""

    @classmethod
    def of(cls, shell: Any) -> ExecuteRequest:
        """The request of the cell running now (call it in that cell, not in a worker thread or a comm task)."""
        kernel = getattr(shell, "kernel", None)
        if kernel is None:  # terminal IPython: no kernel, no execute request
            return cls()
        try:
            parent = kernel.get_parent("shell") or {}
        except Exception:  # an ipykernel without get_parent: nothing to know
            return cls()
        metadata = parent.get("metadata") or {}
        return cls(cell_id=str(metadata.get("cellId") or ""), code=str((parent.get("content") or {}).get("code", "")),
                   session=str((parent.get("header") or {}).get("session", "")))


@dataclass(eq=False)
class NotebookBridge:
    """One kernel's link to the notebook's front end; get it with :meth:`of`."""

    kernel: Any
    front_end: FrontEnd | None = None
    absent: str = ""
    """Why no front end answers (set when the last ``hello`` had no answer)."""
    absent_session: str | None = None
    """The client session in which no front end answered: the next hello waits for a new session."""
    answered_session: str | None = None
    """The client session in which the extension last answered a hello."""
    comm: Any = None
    session: str = ""
    """The client session the comm was opened for: replies from another client (a second notebook on this kernel
    sees the comm too) are dropped."""
    loop: asyncio.AbstractEventLoop | None = None
    pending: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def of(cls, shell: Any) -> NotebookBridge:
        """The bridge of ``shell``'s kernel (made on first use; one per kernel)."""
        bridge = getattr(shell, "_agentkernel_notebook", None)
        if bridge is None:
            bridge = cls(getattr(shell, "kernel", None))
            shell._agentkernel_notebook = bridge
        return bridge

    async def connect(self, session: str = "", *, live: bool = True) -> FrontEnd | None:
        """Open a fresh comm and say hello; the extension's answer, or None (then :attr:`absent` says why).

        ``session``: the client session of the running cell; a hello that had no answer in this session is not
        tried again in it. ``live`` is False when the cell does not await (comm replies could not arrive).
        """
        self.close()
        if self.kernel is None:
            self.absent = "there is no Jupyter kernel here (terminal IPython)"
            return None
        if not live:
            self.absent = "the cell does not await (%autoawait is off), so the front end's answers cannot arrive"
            return None
        if self.absent_session is not None and self.absent_session == session:
            return None  # no extension answered in this session: do not wait for it again
        import comm  # ipykernel sets comm.create_comm to make its own comms

        from .cells import FrontEnd  # pydantic, loaded when a notebook tool is first used

        self.loop, self.session = asyncio.get_running_loop(), session
        request_id, future = self._expect()
        self.comm = comm.create_comm(target_name=COMM_TARGET, data={"request_id": request_id, "op": "hello"})
        self.comm.on_msg(self._on_msg)
        self.comm.on_close(self._on_close)
        try:
            reply = await self._answer(request_id, future, HELLO_TIMEOUT)
            if not reply.get("ok"):
                raise NotebookUnavailable(f"the front end answered: {reply.get('error') or reply.get('reason')}")
            self.front_end = FrontEnd.model_validate(reply)
        except ValueError:
            self.close()
            self.absent, self.absent_session = "the front end's hello was not agentkernel's", None
            return None
        except NotebookUnavailable as e:
            self.close()
            self.absent, self.absent_session = f"{e}", session if isinstance(e, NoAnswer) else None
            return None
        self.absent, self.absent_session, self.answered_session = "", None, session
        return self.front_end

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return the front end's reply (``ok`` true or false); raise
        :class:`NotebookUnavailable` when no front end is connected or it does not answer in time."""
        if self.comm is None or self.front_end is None:
            raise NotebookUnavailable(self.absent or "no notebook front end is connected")
        request_id, future = self._expect()
        self.comm.send({"request_id": request_id, "op": op, **fields})
        try:
            return await self._answer(request_id, future, REQUEST_TIMEOUT)
        except NotebookUnavailable:
            self.close()  # a front end that stopped answering is said hello to again in the next run
            raise

    def close(self) -> None:
        """Close the comm (the next :meth:`connect` opens a new one)."""
        comm, self.comm, self.front_end = self.comm, None, None
        for future in self.pending.values():
            if not future.done():
                future.cancel()
        self.pending.clear()
        if comm is not None:
            LATE_REPLIES.add(comm.comm_id)
            try:
                comm.close()
            except Exception:  # noqa: BLE001 - the kernel is shutting down: nothing to tell
                pass

    # -- the comm's messages -----------------------------------------------------------------------------------

    def _expect(self) -> tuple[str, asyncio.Future[dict[str, Any]]]:
        assert self.loop is not None
        request_id = uuid.uuid4().hex
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.pending[request_id] = future
        return request_id, future

    async def _answer(self, request_id: str, future: asyncio.Future[dict[str, Any]],
                      timeout: float) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise NoAnswer(f"no notebook front end answered in {timeout:g} s") from None
        finally:
            self.pending.pop(request_id, None)

    def _on_msg(self, msg: dict[str, Any]) -> None:
        """The comm's message handler (maybe on another thread): hand a reply someone waits for to the kernel's event
        loop; any other is dropped here, at the cost of reading it."""
        data = msg.get("content", {}).get("data")
        request_id = data.get("request_id") if isinstance(data, dict) else None
        if self.session and msg.get("header", {}).get("session", self.session) != self.session:
            return  # another notebook's front end on this kernel answering too: not the one asked
        if isinstance(request_id, str) and request_id in self.pending and self.loop is not None:
            self.loop.call_soon_threadsafe(self._settle, data)

    def _on_close(self, msg: dict[str, Any]) -> None:
        LATE_REPLIES.add(str(msg.get("content", {}).get("comm_id")))
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._closed)

    def _settle(self, reply: dict[str, Any]) -> None:
        future = self.pending.get(str(reply.get("request_id")))
        if future is not None and not future.done():
            future.set_result(reply)

    def _closed(self) -> None:
        self.comm, self.front_end = None, None
        for future in self.pending.values():
            if not future.done():
                future.set_exception(NotebookUnavailable(
                    "the front end closed the notebook comm (agentkernel's extension is not installed there)"))
