"""The notebook tools of a ``%%agent`` run: ``read_notebook`` (read-only), ``add_cell`` and ``edit_cell``
(side-effecting: they go through the same approval as ``run_python``).

With agentkernel's JupyterLab / Notebook 7 extension they read the live notebook and write it over the
``agentkernel.notebook`` comm (:mod:`.notebook`). Where no extension answers (VS Code, Colab, nbclient, papermill,
nbmake, terminal IPython) ``read_notebook`` reads the saved ``.ipynb`` and says so, ``add_cell`` queues its cells
for ONE ``set_next_input`` payload when the run ends (:meth:`NotebookTools.next_input`), and ``edit_cell`` says
this front end cannot edit. The model is told once per run that no extension answers.

``edit_cell`` changes only a cell the model read whole in this run, and sends what it read as the source it
expects: a cell the user changed since is refused, never overwritten. The model reads sources redacted; a marker
it keeps where the cell held that secret gets the value back when the cell is written, and a marker anywhere else
(in ``add_cell`` too) is refused (:func:`agentkernel.secrets.restore`): no cell is written with a marker over a
secret. Every cell a run adds or edits is logged (:mod:`.undo`), so that ``%agent_undo`` and the Undo buttons can
take the run's changes back.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ...secrets import MARKERS, MisplacedMarker, redact_text, restore
from ...text import cut, load_arguments
from ...tools import MAX_OUTPUT_CHARS, Tool, ToolCall, ToolContext, ToolError, tool
from .notebook import ExecuteRequest, NotebookBridge, NotebookUnavailable
from .undo import ChangeLog, RunChanges

if TYPE_CHECKING:
    from ...instructions import Instruction
    from .cells import Cell, FrontEnd, Reading

MAX_CELLS = 50
CELL_SOURCE_CHARS = 3000
CELL_OUTPUT_CHARS = 1000
DIFF_CHARS = 3000


class CellNotWritten(ToolError):
    """add_cell or edit_cell changed nothing: the message says why."""


@dataclass(frozen=True)
class Seen:
    """What the model was shown of a cell's source: all of it, or its first :data:`CELL_SOURCE_CHARS`."""

    source: str
    whole: bool


class NotebookTools:
    """The notebook tools of one run, bound to an IPython shell and the running cell's execute request.

    ``live`` is False when the cell does not await (the front end's answers could not arrive): the fallbacks
    apply at once. ``history(count)`` describes the kernel's input history, for when no notebook is known.
    """

    def __init__(self, shell: Any, request: ExecuteRequest, history: Callable[[int], str], *, live: bool = True):
        self.shell = shell
        self.request = request
        self.history = history
        self.live = live
        self.bridge = NotebookBridge.of(shell)
        self.asked = False  # whether this run said hello
        self.told = False  # whether the model was told that no extension answers
        self.seen: dict[str, Seen] = {}
        self.types: dict[str, str] = {}  # the cell type of each cell read or added, by id
        self.log = ChangeLog.of(shell)
        self.changes: RunChanges | None = None
        """The cells this run added or edited (None until it changes one)."""
        self.on_change: Callable[[RunChanges], None] | None = None
        """Called at the run's first change of the notebook (the panel shows its Undo button then)."""
        self.anchor = ""  # the last cell this run put at the default place: the next one goes below it
        self.agent_cell = request.cell_id
        self.queued: list[tuple[str, str]] = []  # (cell_type, source) of add_cell calls with no extension
        self.tools: list[Tool] = [
            tool(self.read_notebook),
            tool(self.add_cell, read_only=False),
            tool(self.edit_cell, read_only=False),
        ]

    # -- the tools -------------------------------------------------------------------------------------------

    async def read_notebook(self, start: int = 0, count: int = 50) -> str:
        """The notebook's cells in order: each cell's index, id, type, execution count, source and a short text of
        its outputs; the cell running this agent is marked. A source longer than 3000 characters is cut (its full
        length said). Read a cell before edit_cell changes it.

        Args:
            start: the index of the first cell to show
            count: how many cells to show (at most 50)
        """
        if start < 0 or count < 1:
            raise ValueError(f"start must be 0 or more and count at least 1, not start={start}, count={count}")
        from .cells import read_saved, saved_path

        front_end = await self.front_end()
        if front_end is not None:
            reading = await self.read_live()
            head = f"notebook {reading.path}, live in {front_end.label} (unsaved edits included)"
        else:
            note = self.absence_note()
            path = saved_path(self.shell.user_ns)
            if path is None:
                return (f"{note}no notebook is known: no front end answered and none named a saved .ipynb "
                        "(__session__, __vsc_ipynb_file__). The kernel's input history instead:\n"
                        + self.history(min(count, MAX_CELLS)))
            reading = read_saved(path)
            head = (f"{note}notebook {reading.path} as last saved: this is the file on disk, so edits since "
                    "the last save are not seen")
        return self.listing(reading, start, min(count, MAX_CELLS), head, live=front_end is not None)

    async def add_cell(self, source: str, ctx: ToolContext, cell_type: Literal["code", "markdown"] = "code",
                       after: str = "") -> str:
        """Add a cell to the notebook; it is not run. By default it goes below the cell running this agent and below
        the cells added before in this run, so they read in the order written. Returns the new cell's id. Each call
        needs the user's approval.

        Args:
            source: the cell's text: Python for a code cell, Markdown for a markdown cell
            cell_type: "code" or "markdown"
            after: the id of the cell to put it below (read_notebook shows the ids); empty for the default place
        """
        try:
            restore(source)
        except MisplacedMarker as e:
            raise CellNotWritten(f"not added: {e}") from None
        if await self.front_end() is None:
            self.queued.append((cell_type, source))
            return (f"{self.absence_note()}queued, not added yet: this front end cannot insert cells, so when the run "
                    f"ends the queued cells ({len(self.queued)} so far) become ONE new code "
                    "cell below this one (IPython's set_next_input, which VS Code and terminal IPython show; "
                    "Markdown as # comments; headless runners such as nbclient drop it). It has no id to edit.")
        anchor = after or self.anchor or await self.agent_cell_id()
        if not anchor:
            raise CellNotWritten("not added: the cell running this agent is not known here; give after= the id of "
                                 "a cell from read_notebook")
        reply = await self.bridge.request("insert", after=anchor, cell_type=cell_type, source=source,
                                          metadata=_metadata(ctx.run_id, ctx.call_id))
        if not reply.get("ok"):
            raise CellNotWritten(f"not added: {_refusal(reply)}")
        cell_id = str(reply.get("cell_id"))
        if not after or after == self.anchor:
            self.anchor = cell_id
        self.seen[cell_id] = Seen(source, True)
        self.types[cell_id] = cell_type
        self.run_log(ctx.run_id).added(cell_id, cell_type, source, ctx.call_id)
        return (f"added a {cell_type} cell, id {cell_id}, at index {reply.get('index')} (below cell {anchor}). "
                "It has not run: the user runs it (run_python runs code now).")

    async def edit_cell(self, cell_id: str, source: str, ctx: ToolContext) -> str:
        """Replace the source of a notebook cell; it is not run. Read the cell first (read_notebook): the edit is
        refused if the cell changed since, so the user's own changes are never overwritten. Returns what changed,
        as a diff. Each call needs the user's approval, which shows that diff.

        Args:
            cell_id: the cell's id, as read_notebook shows it
            source: the cell's whole new source
        """
        why = await self.refusal(cell_id, source)
        if why:
            raise CellNotWritten(self.absence_note() + why if self.bridge.front_end is None else why)
        old = self.seen[cell_id].source
        written = restore(source, old)  # refusal() found no misplaced marker
        # The cell's outputs were made by its old source: the front end clears its execution count in the same
        # step, and its metadata says which run and call changed its source.
        reply = await self.bridge.request("replace", cell_id=cell_id, expected_source=old, source=written,
                                          metadata=_metadata(ctx.run_id, ctx.call_id, edited=True))
        if reply.get("ok"):
            self.seen[cell_id] = Seen(written, True)
            self.run_log(ctx.run_id).edited(cell_id, self.types.get(cell_id, "code"), old, written, ctx.call_id,
                                            reply)
            return (f"edited cell {cell_id} (one undo in its editor restores it); it has not run. The "
                    f"change:\n{diff(redact_text(old), source)}")
        if reply.get("reason") == "changed":
            current = str(reply.get("source", ""))
            shown = redact_text(current)
            self.seen[cell_id] = Seen(current, len(shown) <= CELL_SOURCE_CHARS)
            raise CellNotWritten(f"not edited: cell {cell_id} changed since it was read (the user edited "
                                 f"it), so nothing was written. Its source now:\n{cut(shown, CELL_SOURCE_CHARS)}")
        raise CellNotWritten(f"not edited: {_refusal(reply)}")

    # -- approvals -------------------------------------------------------------------------------------------

    async def refusal(self, cell_id: str, source: str) -> str:
        """Why edit_cell would write nothing, known before asking anyone ("" if it may write)."""
        front_end = await self.front_end()
        if front_end is None:
            return ("not edited: this front end cannot edit cells (only JupyterLab and Notebook 7 with agentkernel's "
                    "extension can); say the change in your answer, or add_cell a new cell")
        if not front_end.can_edit:
            return f"not edited: the notebook is read-only in {front_end.label}"
        seen = self.seen.get(cell_id)
        if seen is None:
            return (f"not edited: cell {cell_id} was not read in this run; read_notebook shows it (and the ids), "
                    "then edit_cell can change it")
        shown = redact_text(seen.source)
        if not seen.whole:
            return (f"not edited: read_notebook showed only the first {CELL_SOURCE_CHARS:,} of the "
                    f"{len(shown):,} characters of cell {cell_id}, and an edit replaces the whole source")
        if shown == source:
            return f"not edited: that is already the source of cell {cell_id}"
        try:
            restore(source, seen.source)
        except MisplacedMarker as e:
            return f"not edited: {e}"
        return ""

    async def asks(self, call: ToolCall) -> bool:
        """Whether the call needs the user's approval: not an edit_cell that will be refused anyway, nor an
        add_cell or run_python whose text holds a marker (refused too)."""
        arguments = _arguments(call)
        if call.name in ("add_cell", "run_python"):
            return not MARKERS.search(str(arguments.get("source" if call.name == "add_cell" else "code", "")))
        if call.name != "edit_cell":
            return True
        return not await self.refusal(str(arguments.get("cell_id", "")), str(arguments.get("source", "")))

    def preview(self, call: ToolCall) -> tuple[str, str] | None:
        """For an edit_cell approval: the (old, new) source as the model knows them, with markers on both sides
        (never a value: the new source's markers get their values back only when it is written)."""
        arguments = _arguments(call)
        seen = self.seen.get(str(arguments.get("cell_id")))
        if call.name != "edit_cell" or seen is None:
            return None
        return redact_text(seen.source), str(arguments.get("source", ""))

    # -- the run's end ---------------------------------------------------------------------------------------

    async def write_cells(self, executed: list[tuple[str, str]], run_id: str) -> list[str]:
        """``--cells``: each piece of code run_python ran (``(call_id, code)``, in order) as a real code cell below
        the run's cells, where the extension answers; returns the code not written so (for :meth:`next_input`)."""
        left = list(executed)
        if left and self.live and await self.front_end() is not None:
            anchor = self.anchor or await self.agent_cell_id()
            while left and anchor:
                call_id, code = left[0]
                try:
                    reply = await self.bridge.request("insert", after=anchor, cell_type="code", source=code.strip(),
                                                      metadata=_metadata(run_id, call_id))
                except NotebookUnavailable:
                    break
                if not reply.get("ok"):
                    break
                anchor = self.anchor = str(reply.get("cell_id"))
                self.run_log(run_id).added(anchor, "code", code.strip(), call_id)
                left.pop(0)
        return [code for _, code in left]

    def next_input(self, code: list[str]) -> str:
        """The text of the ONE next input the run leaves (queued add_cell cells, then ``code``), "" if none; and the
        comm closed (the next run says hello again)."""
        self.bridge.close()
        parts = [_as_code(cell_type, source) for cell_type, source in self.queued]
        return "\n\n".join(part for part in [*parts, *(c.strip() for c in code)] if part)

    # -- the notebook's own instructions -----------------------------------------------------------------------

    def saved_instructions(self) -> Instruction | None:
        """The markdown cells tagged ``agent-instructions`` of the saved notebook, if one is known and readable."""
        from .cells import read_saved, saved_path

        path = saved_path(self.shell.user_ns)
        if path is None:
            return None
        try:
            return _tagged(read_saved(path))
        except ValueError:
            return None

    def reads_live(self) -> bool:
        """Whether the tagged cells are read from the front end (:meth:`live_instructions`): a notebook cell that
        awaits, where agentkernel's extension has answered in this client session already. (Not a hello of its own:
        in a front end that neither answers nor closes the comm, that would cost every session's first run its
        timeout.)"""
        session = self.request.session
        return bool(self.live and self.request.cell_id and session and self.bridge.answered_session == session)

    async def live_instructions(self) -> Instruction | None:
        """The tagged cells as the front end has them now (unsaved edits included); those of the saved notebook if
        it does not answer."""
        if await self.front_end() is not None:
            try:
                return _tagged(await self.read_live())
            except (NotebookUnavailable, RuntimeError, ValueError):
                pass
        return self.saved_instructions()

    # -- helpers ---------------------------------------------------------------------------------------------

    def run_log(self, run_id: str) -> RunChanges:
        """This run's log of changed cells (made at its first change)."""
        if self.changes is None:
            self.changes = self.log.run(run_id)
            self.changes.notebook = self.bridge.front_end.path if self.bridge.front_end is not None else ""
            if self.on_change is not None:
                self.on_change(self.changes)
        return self.changes

    async def front_end(self) -> FrontEnd | None:
        """The extension answering for this notebook (said hello to once per run), or None."""
        if not self.asked:
            self.asked = True
            await self.bridge.connect(self.request.session, live=self.live)
        return self.bridge.front_end

    def absence_note(self) -> str:
        """Once per run, the first line of a notebook tool's output: no extension answers, and why."""
        if self.told:
            return ""
        self.told = True
        return (f"[no notebook extension answers here ({self.bridge.absent}): read_notebook reads the saved file, "
                "add_cell queues cells for the run's end, edit_cell cannot edit]\n")

    async def read_live(self) -> Reading:
        from .cells import Reading

        reply = await self.bridge.request("read")
        if not reply.get("ok"):
            raise RuntimeError(f"the front end could not read the notebook: {_refusal(reply)}")
        return Reading.model_validate(reply)

    async def agent_cell_id(self) -> str:
        """The id of the cell running this agent: from the execute request, else the cell holding its code."""
        if not self.agent_cell and self.request.code.strip():
            reading = await self.read_live()
            self.agent_cell = self.by_code(reading)
        return self.agent_cell

    def by_code(self, reading: Reading) -> str:
        code = self.request.code.strip()
        return next((c.id for c in reversed(reading.cells) if code and c.source.strip() == code), "")

    def listing(self, reading: Reading, start: int, count: int, head: str, *, live: bool) -> str:
        """The cells ``start`` to ``start + count`` as the model reads them, within the tool's output bound."""
        cells = reading.cells
        agent = self.agent_cell or self.by_code(reading)
        lines = [f"{head} · {len(cells)} cell{'s' * (len(cells) != 1)}"]
        used, shown_to = len(lines[0]), start
        for index, cell in enumerate(cells[start:start + count], start):
            source = redact_text(cell.source)  # whole, before it is cut
            block = _block(index, cell, source, cell.id == agent, cell.id == reading.active_cell_id)
            if used + len(block) > MAX_OUTPUT_CHARS - 200 and index > start:
                break
            lines.append(block)
            used += len(block) + 1
            shown_to = index + 1
            if live:
                self.seen[cell.id] = Seen(cell.source, len(source) <= CELL_SOURCE_CHARS)
                self.types[cell.id] = cell.cell_type
        if shown_to < len(cells):
            lines.append(f"[cells {shown_to}-{len(cells) - 1} not shown: read_notebook(start={shown_to})]")
        if start >= len(cells) > 0:
            lines.append(f"[no cell at index {start}: the last is {len(cells) - 1}]")
        return "\n".join(lines)


def _block(index: int, cell: Cell, source: str, agent: bool, active: bool) -> str:
    facts = [f"--- cell {index} · {cell.cell_type} · id {cell.id}"]
    if cell.execution_count is not None:
        facts.append(f"In [{cell.execution_count}]")
    if cell.has_error:
        facts.append("its outputs hold an error")
    if cell.metadata_agentkernel:
        facts.append("written by agentkernel")
    if agent:
        facts.append("THIS CELL: the %%agent cell running now")
    elif active:
        facts.append("the user's active cell")
    text = " · ".join(facts) + "\n" + (cut(source, CELL_SOURCE_CHARS) if source else "(empty)")
    if cell.outputs_text.strip() and not agent:
        text += "\n··· outputs:\n" + cut(redact_text(cell.outputs_text.rstrip()), CELL_OUTPUT_CHARS)
    return text


def _tagged(reading: Reading) -> Instruction | None:
    from ...instructions import notebook_instructions  # %load_ext imports this module; instructions come with a run

    return notebook_instructions({"cell_type": c.cell_type, "source": c.source, "tags": c.tags} for c in reading.cells)


def diff(old: str, new: str) -> str:
    """A unified diff of a cell's source, bounded."""
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", lineterm="", n=2)
    return cut("\n".join(lines), DIFF_CHARS)


def _as_code(cell_type: str, source: str) -> str:
    """A queued cell as the text of a code cell: Markdown becomes # comments."""
    if cell_type != "markdown":
        return source.strip()
    return "\n".join(f"# {line}" if line.strip() else "#" for line in source.strip().splitlines())


def _metadata(run_id: str, call_id: str, *, edited: bool = False) -> dict[str, Any]:
    """What a written cell carries: the run and the call that wrote it; for an edited cell also
    ``"source_changed": true``, its source changed since its outputs were made."""
    return {"agentkernel": {"run_id": run_id, "tool_call_id": call_id, **({"source_changed": True} if edited else {})}}


def _refusal(reply: dict[str, Any]) -> str:
    return str(reply.get("error") or reply.get("reason") or "the front end refused")


def _arguments(call: ToolCall) -> dict[str, Any]:
    try:
        value = load_arguments(call.arguments)
    except (ValueError, RecursionError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}
