"""agentkernel's front-end extension played in Python by a kernel test (src/index.ts, src/answerer.ts): it sees the
kernel's comm_open and comm_msg requests on iopub and answers each with a comm_msg on the shell channel, holding the
notebook as a list of cells (in the shape of the ``read`` reply, plus their ``metadata``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from jupyter_client.session import Session
from kernel_client import Cell, KernelSession

from agentkernel.jupyter.kernel.notebook import COMM_TARGET


def another_page(kernel: KernelSession) -> Session:
    """A client session of its own on ``kernel``'s connection: another notebook's page using the same kernel."""
    return Session(key=kernel.kc.session.key, signature_scheme=kernel.kc.session.signature_scheme)


def code_cell(cell_id: str, source: str, count: int | None = None, error: bool = False, out: str = "") -> dict:
    return {"id": cell_id, "cell_type": "code", "source": source, "execution_count": count, "has_error": error,
            "outputs_text": out, "metadata_agentkernel": None}


class FakeNotebook:
    """agentkernel's front-end extension, played by the test: it answers the kernel's requests from ``cells``."""

    def __init__(self, kernel: KernelSession, cells: list[dict[str, Any]], *, close: bool = False,
                 path: str = "study.ipynb", client: Session | None = None):
        self.kernel = kernel
        self.path = path  # the notebook's path, as the hello names it ("": an older extension that does not)
        self.client = client or kernel.kc.session  # another Session: a second notebook's page on this kernel
        self.cells = cells
        self.close = close  # answer the comm_open with comm_close, as JupyterLab without the extension does
        self.requests: list[dict[str, Any]] = []
        self.comms: set[str] = set()
        self.handled: set[str] = set()
        self.after_read: Callable[[], None] | None = None  # what the user does once the model has read
        self.made = 0
        self.active = "agent"  # the user's active cell
        self.panel = True  # False: the extension finds no notebook panel for this kernel

    def submit(self, code: str, cell_id: str = "agent", silent: bool = False) -> Cell:
        """Send the agent's cell as JupyterLab does: an execute_request with ``metadata.cellId``; ``silent``: as
        the extension's Undo button does (no cell, no execution count)."""
        content = {"code": code, "silent": silent, "store_history": not silent, "user_expressions": {},
                   "allow_stdin": False, "stop_on_error": not silent}
        metadata = {} if silent else {"cellId": cell_id}
        msg = self.client.msg("execute_request", content, metadata=metadata)
        self.kernel.kc.shell_channel.send(msg)
        return Cell(self.kernel, msg["header"]["msg_id"], code)

    def serve_until(self, cell: Cell, done: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out\n{cell.describe()}"
            self.kernel.pump(0.02)
            self.serve(cell)

    def run(self, cell: Cell, timeout: float = 30) -> Cell:
        self.serve_until(cell, lambda: cell.done, timeout)
        assert cell.status == "ok" and not cell.errors, cell.describe()
        return cell

    def serve(self, cell: Cell) -> None:
        # The cell's messages, and requests on its comms sent from elsewhere (an Undo click's task has the click as
        # its parent message)
        elsewhere = [m for parent, items in list(self.kernel.iopub.items()) if parent != cell.msg_id for _, m in items
                     if m["msg_type"] == "comm_msg" and m["content"].get("comm_id") in self.comms]
        for msg in [*cell.messages, *elsewhere]:
            content = msg["content"]
            if msg["header"]["msg_id"] in self.handled:
                continue
            if msg["msg_type"] == "comm_open" and content.get("target_name") == COMM_TARGET:
                self.comms.add(content["comm_id"])
                if self.close:
                    self.send("comm_close", {"comm_id": content["comm_id"], "data": {}})
                    continue
            elif not (msg["msg_type"] == "comm_msg" and content["comm_id"] in self.comms):
                continue
            self.handled.add(msg["header"]["msg_id"])
            request = content["data"]
            self.requests.append(request)
            reply = {"request_id": request["request_id"], **self.answer(request)}
            self.send("comm_msg", {"comm_id": content["comm_id"], "data": reply})
            if request["op"] == "read" and self.after_read is not None:
                after, self.after_read = self.after_read, None
                after()  # (which may set the next one)

    def send(self, msg_type: str, content: dict[str, Any]) -> None:
        self.kernel.kc.shell_channel.send(self.client.msg(msg_type, content))

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if not self.panel:
            return {"ok": False, "reason": "error", "error": "no notebook panel has this kernel"}
        if op == "hello":
            return {"ok": True, "front_end": "jupyterlab", "version": "0.1.1", "can_edit": True,
                    **({"path": self.path} if self.path else {})}
        if op == "read":
            return {"ok": True, "path": self.path, "active_cell_id": self.active, "cells": self.cells}
        if op == "restore":
            return self.restore(request)
        ids = [c["id"] for c in self.cells]
        wanted = request["after"] if op == "insert" else request["cell_id"]
        if wanted not in ids:
            return {"ok": False, "reason": "missing", "error": f"no cell with id {wanted!r}"}
        if op == "insert":
            self.made += 1
            cell = {**code_cell(f"new-{self.made}", request["source"]), "cell_type": request["cell_type"],
                    "metadata": request["metadata"]}
            index = ids.index(wanted) + 1
            self.cells.insert(index, cell)
            return {"ok": True, "cell_id": cell["id"], "index": index}
        cell = self.cells[ids.index(wanted)]
        if cell["source"] != request["expected_source"]:
            return {"ok": False, "reason": "changed", "error": "the cell changed since it was read",
                    "source": cell["source"]}
        old, old_count = cell["source"], cell["execution_count"]
        old_metadata = {key: cell.get("metadata", {}).get(key) for key in request["metadata"]}
        self.rewrite(cell, request["source"], request["metadata"], None)
        return {"ok": True, "old_source": old, "old_execution_count": old_count, "old_metadata": old_metadata}

    def restore(self, request: dict[str, Any]) -> dict[str, Any]:
        removed, restored, changed, missing = [], [], [], []
        for item in request["cells"]:
            cell = next((c for c in self.cells if c["id"] == item["cell_id"]), None)
            if cell is None:
                missing.append(item["cell_id"])
            elif cell["source"] != item["expected_source"]:
                changed.append({"cell_id": cell["id"], "source": cell["source"]})
            elif item["source"] is None:
                self.cells.remove(cell)
                removed.append(cell["id"])
            else:
                count = item["execution_count"] if cell["execution_count"] is None else None
                self.rewrite(cell, item["source"], item["metadata"], count)
                restored.append(cell["id"])
        return {"ok": True, "removed": removed, "restored": restored, "changed": changed, "missing": missing}

    @staticmethod
    def rewrite(cell: dict[str, Any], source: str, metadata: dict[str, Any], count: int | None) -> None:
        """As the extension does: the source, the top-level metadata keys (None deletes one), the count."""
        merged = {**cell.get("metadata", {}), **metadata}
        cell["metadata"] = {key: value for key, value in merged.items() if value is not None}
        cell["metadata_agentkernel"] = cell["metadata"].get("agentkernel")
        cell["source"], cell["execution_count"] = source, count

    def cell(self, cell_id: str) -> dict[str, Any]:
        return next(c for c in self.cells if c["id"] == cell_id)

    @property
    def ops(self) -> list[str]:
        return [r["op"] for r in self.requests]
