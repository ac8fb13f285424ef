"""What each run changed in the notebook, and taking it back: ``%agent_undo [RUN_ID]`` and the Undo buttons.

The notebook tools log every cell a run added or edited (:class:`RunChanges`, kept per kernel by
:class:`ChangeLog`): its id, what the run wrote last, and for an edited cell its source, execution count and
``metadata.agentkernel`` from before the run. :func:`undo` asks agentkernel's front-end extension to ``restore``
them at once (docs/notebook-protocol.md): the added cells are removed, the edited ones get their source back. A cell
whose source is no longer what the run wrote (the user changed it, or a later run did) is left as it is and named;
it stays in the log, so undoing again once it is back as the run left it takes it back too. Only JupyterLab and
Notebook 7 with the extension can change cells; elsewhere the undo says why it cannot, in one line.

The same undo takes back what the run's ``run_python`` calls did to the kernel's variables (:mod:`agentkernel.journal`,
one journal per run id, so a served session or a background run is one unit too): this part needs no front end.
"""

from __future__ import annotations

import asyncio
import html
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ...journal import MAX_RUNS as JOURNALED_RUNS
from ...journal import Journal, Journals, Outcome, size_text
from ...secrets import redact_text
from .notebook import ExecuteRequest, NotebookBridge, NotebookUnavailable

UNDO_MIME = "application/vnd.agentkernel.undo+json"
"""The output below a run's record that the extension shows as its Undo button (src/undo.ts)."""
MAX_RUNS = 100
"""How many runs that changed the notebook the kernel remembers (the oldest is forgotten first)."""
ONLY_WITH_EXTENSION = "only JupyterLab and Notebook 7 with agentkernel's extension can change cells"


@dataclass
class CellChange:
    """One cell a run added or edited."""

    cell_id: str
    cell_type: str
    added: bool
    """True: the run added the cell (undo removes it); False: it edited a cell that was there."""
    source: str
    """What the run wrote last."""
    before: str = ""
    """The source before the run's first edit (an edited cell)."""
    execution_count: int | None = None
    """The execution count before the run's first edit."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The metadata keys the run's first edit set, as they were before it (None: absent)."""
    call_id: str = ""
    """The call that first changed it."""

    def restore(self) -> dict[str, Any]:
        """The ``restore`` request's entry for this cell."""
        if self.added:
            return {"cell_id": self.cell_id, "expected_source": self.source, "source": None}
        return {"cell_id": self.cell_id, "expected_source": self.source, "source": self.before,
                "execution_count": self.execution_count, "metadata": self.metadata}

    def label(self, source: str | None = None) -> str:
        """The cell as a line names it: its id and the start of the first line of ``source`` (by default what the
        run wrote), its secrets redacted before it is cut."""
        first = redact_text(self.source if source is None else source).strip().split("\n", 1)[0]
        return f"cell {self.cell_id} ({first[:40] + '…' * (len(first) > 40) or 'empty'})"


@dataclass
class RunChanges:
    """The cells one run changed, in the order it first changed them."""

    run_id: str
    cells: dict[str, CellChange] = field(default_factory=dict)
    notebook: str = ""
    """The path of the notebook the run changed, as the extension names it ("" when it did not say)."""
    born: float = field(default_factory=time.monotonic)
    """When its first change was logged (the default undo takes the newest run, cells or variables)."""

    def added(self, cell_id: str, cell_type: str, source: str, call_id: str) -> None:
        self.cells[cell_id] = CellChange(cell_id, cell_type, True, source, call_id=call_id)

    def edited(self, cell_id: str, cell_type: str, before: str, source: str, call_id: str,
               reply: dict[str, Any]) -> None:
        """Log an edit the front end confirmed (``reply``: its ``replace`` answer). A cell the run changed before
        keeps what it was before the run; only what the run wrote last changes."""
        if cell_id in self.cells:
            self.cells[cell_id].source = source
            return
        count = reply.get("old_execution_count")
        metadata = reply.get("old_metadata")
        self.cells[cell_id] = CellChange(
            cell_id, cell_type, False, source, before=str(reply.get("old_source", before)),
            execution_count=count if isinstance(count, int) else None,
            metadata=metadata if isinstance(metadata, dict) else {}, call_id=call_id)

    def summary(self) -> str:
        """``3 cells: 2 added, 1 edited``."""
        added = sum(change.added for change in self.cells.values())
        parts = [f"{count} {what}" for count, what in ((added, "added"), (len(self.cells) - added, "edited")) if count]
        return f"{len(self.cells)} cell{'s' * (len(self.cells) != 1)}: {', '.join(parts) or 'none'}"

    def output(self) -> UndoOutput:
        """The run's Undo button (the extension renders it; elsewhere the text shows)."""
        return UndoOutput.of(self.run_id, self.summary(), cells=len(self.cells))


@dataclass(eq=False)
class ChangeLog:
    """The notebook changes of this kernel's runs, by run id (oldest first); get it with :meth:`of`."""

    runs: OrderedDict[str, RunChanges] = field(default_factory=OrderedDict)

    @classmethod
    def of(cls, shell: Any) -> ChangeLog:
        """The log of ``shell``'s kernel (made on first use)."""
        log = getattr(shell, "_agentkernel_changes", None)
        if log is None:
            log = shell._agentkernel_changes = cls()
        return log

    def run(self, run_id: str) -> RunChanges:
        """The changes of ``run_id``, logged from now on (the newest run last)."""
        if run_id not in self.runs:
            self.runs[run_id] = RunChanges(run_id)
            while len(self.runs) > MAX_RUNS:
                self.runs.popitem(last=False)
        return self.runs[run_id]

    def find(self, run_id: str = "") -> RunChanges | str:
        """The changes of ``run_id`` (by default the last run with changes left), or why there are none."""
        if not run_id:
            last = next((run for run in reversed(self.runs.values()) if run.cells), None)
            if last is None and self.runs:
                return "nothing left to undo: the notebook changes of this kernel's runs have been taken back"
            return last or ("nothing to undo: no run of this kernel has changed the notebook (add_cell and "
                            f"edit_cell change it where the extension answers: {ONLY_WITH_EXTENSION})")
        run = self.runs.get(run_id)
        if run is None:
            return (f"nothing to undo: run {run_id} did not change the notebook from this kernel (a restarted "
                    "kernel forgets its runs; Ctrl-Z in a cell's editor still undoes an edit)")
        if not run.cells:
            return f"nothing left to undo of run {run_id}"
        return run


def journals_of(shell: Any) -> Journals:
    """The journals of what ``shell``'s kernel's runs did to its variables (made on first use)."""
    journals = getattr(shell, "_agentkernel_journals", None)
    if journals is None:
        journals = shell._agentkernel_journals = Journals()
    return journals


def _found(shell: Any, run_id: str) -> tuple[RunChanges | None, Journal | None] | str:
    """What is left to undo of ``run_id`` (by default the newest run with something left): its cells and its
    journal (None: nothing there), or why there is nothing."""
    log, journals = ChangeLog.of(shell), journals_of(shell)
    if not run_id:
        left = [(run.born, run_id) for run_id, run in log.runs.items() if run.cells]
        left += [(journal.born, run_id) for run_id, journal in journals.runs.items() if not journal.empty]
        if not left:
            if any(journal.calls for journal in journals.runs.values()):
                return "nothing left to undo: the changes of this kernel's runs have been taken back"
            found = log.find()
            assert isinstance(found, str)
            return found
        run_id = max(left)[1]
    run, journal = log.runs.get(run_id), journals.runs.get(run_id)
    if journal is None or not journal.calls:
        found = log.find(run_id)
        return found if isinstance(found, str) else (found, None)
    if (run is None or not run.cells) and journal.empty:
        return f"nothing left to undo of run {run_id}"
    return (run if run is not None and run.cells else None), (None if journal.empty else journal)


async def undo(shell: Any, run_id: str = "", *, session: str | None = None, variables: bool = True) -> str:
    """Take back what ``run_id`` (by default the newest run with something left to undo) did to the notebook and to
    the kernel's variables, in one step; one line saying what was done, what was left, or why not. The variables
    are taken back wherever the kernel runs; the cells where the extension answers. ``session``: the client session
    asking (by default the running cell's); ``variables=False``: the cells only (the live panel's button, while the
    run's code may still be running)."""
    found = _found(shell, run_id) if variables else ChangeLog.of(shell).find(run_id)
    if isinstance(found, str):
        return found
    run, journal = found if isinstance(found, tuple) else (found, None)
    cells = await _undo_cells(shell, run, session) if run is not None else ""
    if journal is None:
        return cells
    return together(journal, journal.undo(shell.user_ns), cells)


FORGET = "--forget"


def forget(shell: Any, words: list[str]) -> str:
    """``%agent_undo --forget [RUN_ID]``: let go of what the journal of ``RUN_ID`` (by default of every run) keeps
    alive so that its variables can be undone; the line saying what was let go. Its cells can still be undone."""
    if len(words) > 1:
        return f"%agent_undo {FORGET} takes at most one run id, not {' '.join(words)!r}"
    journals = journals_of(shell)
    if words and words[0] not in journals.runs:
        return (f"nothing to forget: this kernel keeps no variables of run {words[0]} (it keeps those of its last "
                f"{JOURNALED_RUNS} runs)")
    forgotten = [j for j in journals.forget(words[0] if words else "") if not j.empty]
    if not forgotten:
        return "nothing to forget: no run of this kernel keeps variables to undo"
    kept = sum(j.kept for j in forgotten)
    names = sum(j.names for j in forgotten)
    whose = f"run {forgotten[0].run_id}" if words else f"{len(forgotten)} run{'s' * (len(forgotten) != 1)}"
    return (f"forgot what {whose} did to the variables: the old objects of {names} variable{'s' * (names != 1)} "
            f"and {size_text(kept)} of copies are let go, and no undo can take those changes back (the notebook's "
            "cells still can)")


def undo_unawaited(shell: Any, line: str, why: str) -> str:
    """``%agent_undo`` where it cannot await the front end (``why``): the run's variables are taken back, its cells
    cannot be."""
    words = line.split()
    if words and words[0] == FORGET:
        return forget(shell, words[1:])
    if len(words) > 1:
        return f"%agent_undo takes at most one run id, not {line.strip()!r}"
    cannot = f"the front end's answers arrive only while the cell awaits, and {why}"
    found = _found(shell, words[0] if words else "")
    if isinstance(found, str):
        return found
    run, journal = found
    if journal is None:
        return f"cannot undo here: {cannot}"
    said = together(journal, journal.undo(shell.user_ns))
    return f"{said}; its cells were not: {cannot}" if run is not None else said


@dataclass(frozen=True)
class UndoOutput:
    """A finished run's Undo button as a display: ``data`` (what it changed, and a line for views without the
    extension) and ``metadata`` (the run's id). The id is in the metadata because nbval compares every MIME type of
    ``data``: a tested notebook's re-run, whose run id is new, must still compare equal."""

    data: dict[str, Any]
    metadata: dict[str, Any]

    @classmethod
    def of(cls, run_id: str, changed: str, *, cells: int, variables: int = 0) -> UndoOutput:
        counts = {"cells": cells} | ({"variables": variables} if variables else {})
        line = (f"this run changed {changed}; while this kernel runs, %agent_undo takes back the newest run, "
                "%agent_undo RUN_ID this one (_agent.run_id)")
        return cls({UNDO_MIME: counts, "text/plain": line}, {UNDO_MIME: {"run_id": run_id}})


def record_output(shell: Any, run_id: str, changes: RunChanges | None) -> UndoOutput | None:
    """A finished run's Undo button (the extension renders it; elsewhere the text shows), when the run changed cells
    or variables; else None."""
    journal = journals_of(shell).runs.get(run_id)
    names = journal.names if journal is not None else 0
    cells = len(changes.cells) if changes is not None else 0
    if not cells and not names:
        return None
    changed = [changes.summary()] if changes is not None and cells else []
    changed += [f"{names} variable{'s' * (names != 1)}"] if names else []
    return UndoOutput.of(run_id, " and ".join(changed), cells=cells, variables=names)


def together(journal: Journal, outcome: Outcome, cells: str = "") -> str:
    """One line for an undo: the cells' part (``cells``, as :func:`_outcome` says it), the variables' part, and what
    no undo takes back."""
    calls = f"{journal.calls} run_python call{'s' * (journal.calls != 1)}"
    outside = f"what the code of its {calls} did outside the kernel's variables (files, requests) is not undone"
    said = outcome.line() or "they were already as before the run"
    if cells:
        if outcome.left and cells.startswith(f"undid run {journal.run_id}:"):  # the cells all, the variables not
            cells = cells.replace("undid run", "undid part of run", 1)
        return f"{cells}; variables: {said}; {outside}"
    head = "undid" if outcome.restored and not outcome.left else "undid part of" if outcome.restored else \
        "did not undo"
    return f"{head} run {journal.run_id}: {said}; {outside}"


async def _undo_cells(shell: Any, run: RunChanges, session: str | None) -> str:
    """Take back the notebook changes of ``run``; the line saying so, or why not."""
    bridge = NotebookBridge.of(shell)
    opened = bridge.front_end is None  # a run still going keeps its comm; otherwise say hello for this undo
    if opened:
        await bridge.connect(ExecuteRequest.of(shell).session if session is None else session)
    front_end = bridge.front_end
    try:
        if front_end is None:
            return f"cannot undo run {run.run_id} here: {bridge.absent}; {ONLY_WITH_EXTENSION}"
        if run.notebook and front_end.path and front_end.path != run.notebook:
            return (f"cannot undo run {run.run_id} from {front_end.path}: it changed {run.notebook} (undo it from "
                    "there)")
        if not front_end.can_edit:
            return f"cannot undo run {run.run_id}: the notebook is read-only in {front_end.label}"
        reply = await bridge.request("restore", cells=[change.restore() for change in run.cells.values()])
    except NotebookUnavailable as e:
        return f"cannot undo run {run.run_id}: {e}"
    finally:
        if opened:
            bridge.close()
    if not reply.get("ok"):
        return f"cannot undo run {run.run_id}: {reply.get('error') or reply.get('reason')}"
    return _outcome(run, reply)


def _outcome(run: RunChanges, reply: dict[str, Any]) -> str:
    """Drop what the front end took back (or what is gone) from ``run``; the line saying what happened."""
    def ids(key: str) -> list[str]:
        value = reply.get(key)
        return [str(i) for i in value] if isinstance(value, list) else []

    changed = {str(item.get("cell_id")): str(item.get("source", "")) for item in reply.get("changed") or []
               if isinstance(item, dict)}
    gone = [run.cells[cell_id] for cell_id in ids("missing") if cell_id in run.cells and not run.cells[cell_id].added]
    removed, restored = len(ids("removed")), len(ids("restored"))
    if run.cells and set(ids("missing")) == set(run.cells):
        # Not one of its cells is here: another notebook's run (a front end that does not name its notebook), or
        # the user deleted them all. The run stays on the log, undoable where its cells are.
        return (f"did not undo run {run.run_id}: none of the cells it changed is in this notebook (it changed "
                "another notebook, or they were deleted)")
    for cell_id in [*ids("removed"), *ids("restored"), *ids("missing")]:
        run.cells.pop(cell_id, None)
    done = [f"removed {removed} added cell{'s' * (removed != 1)}"] if removed else []
    done += [f"restored {restored} edited cell{'s' * (restored != 1)}"] if restored else []
    if gone:
        done.append(f"{', '.join(change.label() for change in gone)} it edited {'is' if len(gone) == 1 else 'are'} "
                    "gone")
    named = ", ".join(run.cells[cell_id].label(source) for cell_id, source in changed.items() if cell_id in run.cells)
    if not named:
        return f"undid run {run.run_id}: {', '.join(done) or 'its cells were already gone'}"
    why = (f"left as they are, changed since the run wrote them: {named} (once they are as the run left them, "
           f"%agent_undo {run.run_id} takes them back too)")
    if done:
        return f"undid part of run {run.run_id}: {', '.join(done)}; {why}"
    return f"did not undo run {run.run_id}: {why}"


UNDO_LABEL = "Undo this run's notebook changes"


def live_button(shell: Any, changes: RunChanges, session: str) -> Any:
    """The live panel's Undo button for a run that has changed the notebook, and the line beside it saying what the
    undo did. A click takes back what the run changed so far (what it changes later stays undoable from its record);
    it may come on another thread, so it hands the undo to the kernel's event loop (the run's, which is running)."""
    import ipywidgets as widgets  # type: ignore[import-untyped]

    loop = asyncio.get_running_loop()
    button = widgets.Button(description=UNDO_LABEL, icon="undo", button_style="warning",
                            layout=widgets.Layout(width="auto", flex="none"),
                            tooltip=f"%agent_undo {changes.run_id}: remove the cells this run added, give back the "
                                    "source of the cells it edited")
    said = widgets.HTML()

    async def take_back() -> None:
        button.disabled = True
        said.value = html.escape(await undo(shell, changes.run_id, session=session, variables=False))
        button.disabled = False

    button.on_click(lambda _: loop.call_soon_threadsafe(lambda: loop.create_task(take_back())))
    return widgets.HBox([button, said])


async def undo_line(shell: Any, line: str) -> str:
    """``%agent_undo [RUN_ID]``, awaited: the line it prints."""
    words = line.split()
    if words and words[0] == FORGET:
        return forget(shell, words[1:])
    if len(words) > 1:
        return f"%agent_undo takes at most one run id, not {line.strip()!r}"
    return await undo(shell, words[0] if words else "")
