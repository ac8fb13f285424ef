"""The kernel's end of the ``agentkernel.notebook`` comm, for the browser tests (the kernel tools have their own).

The browser tests copy this module beside their notebooks and import it in a cell of a notebook open in JupyterLab
or Notebook 7 (its kernel started by the server), then ``await front_end.ask("read")`` in later cells: ipykernel
>= 7.4 dispatches the front end's comm messages while a cell awaits, so the reply arrives during the cell. The
kernel opens the comm with the first request as the open message's data, and sends later requests as comm messages
(docs/notebook-protocol.md).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

TARGET = "agentkernel.notebook"


class FrontEnd:
    """Requests to the front end over one comm, opened at the first :meth:`ask`."""

    def __init__(self) -> None:
        self.comm: Any = None
        self.closed = False
        self.waiting: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[dict[str, Any]]]] = {}

    async def ask(self, op: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        """Send ``{"request_id", "op", **fields}``; return the front end's reply (TimeoutError if none comes)."""
        from comm import create_comm  # ipykernel's Comm; `ipykernel.comm.Comm` itself warns that it is deprecated

        request = {"request_id": uuid.uuid4().hex, "op": op, **fields}
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.waiting[request["request_id"]] = (loop, future)
        if self.comm is None:
            self.comm = create_comm(target_name=TARGET, data=request)
            self.comm.on_msg(self._on_msg)
            self.comm.on_close(self._on_close)
        else:
            self.comm.send(request)
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self.waiting.pop(request["request_id"], None)

    def _on_msg(self, msg: dict[str, Any]) -> None:
        # The handler may run on another thread than the awaiting cell's loop: hand the reply over thread-safely.
        data = msg["content"]["data"]
        entry = self.waiting.get(data.get("request_id"))
        if entry is not None:
            loop, future = entry
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(data))

    def _on_close(self, msg: dict[str, Any]) -> None:
        self.closed = True


def cell_id() -> str | None:
    """The id of the cell running now: the front end sends it in the execute request's metadata."""
    from IPython import get_ipython

    return get_ipython().kernel.get_parent().get("metadata", {}).get("cellId")


def show(**replies: Any) -> None:
    """Print the replies as one line the browser test finds in the cell's output."""
    print("REPLIES " + json.dumps(replies, sort_keys=True))
