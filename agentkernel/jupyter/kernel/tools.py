"""The kernel tools: the agent sees the notebook's variables, inspects values, reads the last error (read-only),
and runs code in the kernel behind approval (``run_python``). The notebook's cells are
:mod:`.notebook_tools`'s.

They need the IPython shell, so they live in the Jupyter layer and are built per run::

    tools = KernelTools(get_ipython())
    await agentkernel.run("What columns does df have?", model=model, tools=tools.tools)
    tools.executed_code    # the code run_python ran, in order

``run_python`` returns its rich outputs (figures, HTML) as the result's displays, for front ends to show in the
call's section.

Every output is bounded (:data:`~agentkernel.tools.MAX_OUTPUT_CHARS`, as for any tool) and marked where cut. Names are
looked up in the user namespace and dotted paths walked with ``getattr`` on identifiers only: nothing the model
writes is evaluated, except the code of an approved ``run_python`` call.
"""

from __future__ import annotations

import contextlib
import linecache
import re
import sys
import traceback
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from ...journal import changes_display
from ...record.images import IMAGE_TYPES, Image, images_for_model
from ...secrets import redact_text, restore
from ...text import cut, short, take_lines
from ...tools import MAX_OUTPUT_CHARS, Display, Tool, ToolContext, ToolError, ToolOutput, in_thread, tool
from .code_runner import CodeRunner, Execution
from .describe import describe, one_line, size_hint, type_name
from .tracebacks import cell_names, cell_number, format_error
from .undo import journals_of

RUN_PYTHON_TIMEOUT = 300.0
"""Seconds a run_python call may take before it is stopped like an aborted one."""
MAX_VARIABLES = 300
MAX_CELLS = 50
CELL_INPUT_CHARS = 3000
CELL_OUTPUT_CHARS = 1000

class CodeFailed(ToolError):
    """run_python's code raised: the message is the error's first line, then everything the code showed."""


class KernelTools:
    """The kernel tools of one ``%%agent`` run, bound to an IPython shell.

    ``images=True`` also gives the model ``run_python``'s images (figures and image outputs) as images, bounded
    as :mod:`agentkernel.record.images` says. Outputs, errors and every text part of a display are redacted where
    every tool's are (:class:`agentkernel.tools.runner.ToolRunner`), before anything shows, saves or sends them.
    """

    def __init__(self, shell: Any, *, images: bool = False):
        self.shell = shell
        self.runner = CodeRunner(shell)
        self.journals = journals_of(shell)
        """The kernel's journals of what runs did to the namespace (``%agent_undo`` takes them back)."""
        self.send_images = images
        self.executed_calls: list[tuple[str, str]] = []
        """(call_id, code) of each piece of code run_python ran, in order (``--cells`` writes them)."""
        # The input history (once the notebook_cells tool) is what read_notebook shows where no notebook is known;
        # --tools notebook_cells names read_notebook.
        self.tools: list[Tool] = [
            tool(self.list_variables),
            tool(self.inspect_variable),
            tool(self.last_error),
            tool(self.run_python, read_only=False, timeout=RUN_PYTHON_TIMEOUT),
        ]

    @property
    def executed_code(self) -> list[str]:
        """The code ``run_python`` ran (approved, compiled and started), in order."""
        return list(self.runner.executed)

    # -- the tools -------------------------------------------------------------------------------------------

    def list_variables(self) -> str:
        """List the notebook's variables (as %whos shows them; no modules, no _-names): name, type, size
        (shape or length) and a one-line value."""
        variables = sorted(self.user_variables(), key=lambda variable: variable[0])
        if not variables:
            return "no variables yet: the notebook's namespace holds no user variables"
        rows = [(name, *self._row(value)) for name, value in variables[:MAX_VARIABLES]]
        # Columns as wide as their longest cell, up to a limit (a longer name or type just pushes its row along).
        widths = [min(max(len(row[i]) for row in rows), 24) for i in range(3)]
        header = ("name", "type", "size")
        widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + "  value"]
        body = ("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
                for row in rows)
        lines += take_lines(body, MAX_OUTPUT_CHARS - 100)[0]  # room for the note
        if len(lines) - 1 < len(variables):
            lines.append(f"[{len(variables) - len(lines) + 1:,} more variables not shown]")
        return "\n".join(lines)

    def inspect_variable(self, name: str) -> str:
        """Describe one variable of the notebook; name may be a dotted path such as df.columns or
        model.coef_. DataFrames and Series: shape, dtypes, missing values, first rows, describe of numeric
        columns; arrays: shape, dtype, min/max/mean; containers: length and first items; functions: signature
        and doc.

        Args:
            name: a variable name or a dotted path of attribute names (no calls, no indexing)
        """
        return describe(self.lookup(name))

    def last_error(self) -> str:
        """The last exception raised in a notebook cell: its type, message, the traceback from the
        notebook's code on, and the source of the cell that raised it."""
        error: BaseException | None = getattr(sys, "last_value", None)
        if error is None:
            return "no error so far: no notebook cell has raised an exception in this kernel"
        return self._describe_error(error)

    def input_history(self, count: int = 5) -> str:
        """The inputs of the last executed notebook cells (before this one), with the text of their Out values
        (what read_notebook shows where no notebook is known).

        Args:
            count: how many cells, counted back from the current one (at most 50)
        """
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        outputs: dict[int, Any] = self.shell.history_manager.output_hist
        current = self._current_cell()
        numbers = [n for n in range(max(1, current - min(count, MAX_CELLS)), current) if self._input(n) is not None]
        if not numbers:
            return "no cells have run before this one"
        parts = []
        for n in numbers:
            parts.append(f"In [{n}]:\n{cut(redact_text(str(self._input(n)).rstrip()), CELL_INPUT_CHARS)}")
            if n in outputs:
                parts.append(f"Out[{n}]:\n{cut(redact_text(self._plain(outputs[n])), CELL_OUTPUT_CHARS)}")
        if count > MAX_CELLS:
            parts.append(f"[only the last {MAX_CELLS} cells are shown]")
        return "\n".join(parts)

    async def run_python(self, code: str, ctx: ToolContext) -> str | ToolOutput:
        """Run Python code in the notebook's kernel, in the user's namespace, the way a cell runs:
        statements, then the value of a final expression; top-level await and IPython syntax work; variables it
        sets stay. It does not add to In/Out. Returns stdout, stderr, displayed outputs (images as
        [image/png WxH]) and the value. Each call needs the user's approval.

        Args:
            code: the Python code to run
        """
        if re.match(r"\s*%%?agent\b", code):
            raise ValueError("run_python does not start another %%agent run")
        restore(code, where="code")  # a marker in code: refused, saying what to use instead
        ran = len(self.runner.executed)
        changed: list[Display] = []
        try:
            with self.journaled(code, ctx.run_id, changed):
                execution = await self.runner.run(code)
        finally:
            if len(self.runner.executed) > ran:
                self.executed_calls.append((ctx.call_id, self.runner.executed[-1]))
        displays = [Display(o.data, o.metadata) for o in execution.rich] + changed
        if execution.error is not None:
            text = execution.text()
            raise CodeFailed(f"{short(redact_text(execution.error.partition(chr(10))[0]), 200)}\n{text}", displays)
        images, notes = [], {}
        if self.send_images:  # in a thread: downscaling a large image takes a second, which Stop must not wait for
            images, notes = await in_thread(self.model_images, {"execution": execution}, "run_python images")
        text = execution.text(notes)
        return ToolOutput(text, images, displays) if images or displays else text

    @contextlib.contextmanager
    def journaled(self, code: str, run_id: str, changed: list[Display]) -> Iterator[None]:
        """Around running ``code``: the run's journal of the namespace (:mod:`agentkernel.journal`) notes what it
        can reach before and what it changed after, whatever happened meanwhile (an error, Stop); ``changed`` gets
        the display naming the changed variables."""
        try:
            compiled = self.runner.prepare(code)
        except Exception:  # the code cannot run: the runner says why when it compiles it again
            compiled = []
        journal = self.journals.run(run_id)
        namespace = self.shell.user_ns
        try:
            call = journal.before(namespace, compiled, epoch=self.shell.execution_count)
        except Exception as e:  # the journal must never keep the code from running: the undo will say so
            journal.not_followed(e)
            call = None
        try:
            yield
        finally:
            if call is not None:
                try:
                    if (display := changes_display(journal.after_call(namespace, call))) is not None:
                        changed.append(display)
                except Exception as e:
                    journal.not_followed(e)

    def model_images(self, execution: Execution) -> tuple[list[Image], dict[int, str]]:
        """The images of an execution to send to the model (see :func:`~agentkernel.record.images.images_for_model`),
        and per output a note for its placeholder saying what became of its image."""
        found: dict[int, tuple[str, str]] = {}
        for index, output in enumerate(execution.outputs):
            mime = next((m for m in IMAGE_TYPES if m in output.data), None)  # the one its placeholder names first
            if mime is not None:
                found[index] = (mime, output.data[mime])
        images, notes = images_for_model(list(found.values()))
        return images, dict(zip(found, notes, strict=True))

    # -- helpers ---------------------------------------------------------------------------------------------

    def user_variables(self) -> list[tuple[str, Any]]:
        """The user's variables as %whos sees them: no _-names, nothing IPython put there, no modules."""
        hidden = self.shell.user_ns_hidden
        missing = object()

        def ipythons(name: str, value: Any) -> bool:
            # exit and quit are bound to sys.exit for the run's length (see exits.py): still IPython's.
            return value is hidden.get(name, missing) or (name in hidden and value is sys.exit)

        return [(name, value) for name, value in self.shell.user_ns.items()
                if not name.startswith("_") and not ipythons(name, value) and not isinstance(value, ModuleType)]

    def lookup(self, name: str) -> Any:
        """The value at a dotted path in the user namespace, walked with getattr; raise a message naming what is
        missing."""
        parts = name.strip().split(".")
        if not all(part.isidentifier() for part in parts):
            raise ValueError(f"{name!r} is not a variable name or a dotted path of names (like df.columns); "
                             "calls, indexing and expressions are not evaluated")
        head, *rest = parts
        if head not in self.shell.user_ns:
            raise NameError(f"no variable named {head!r} in the notebook; list_variables() shows what there is")
        value = self.shell.user_ns[head]
        for i, part in enumerate(rest):
            try:
                value = getattr(value, part)
            except AttributeError:
                path = ".".join(parts[: i + 1])
                raise AttributeError(f"{name!r} does not exist: {path} (a {type_name(value)}) has no attribute "
                                     f"{part!r}") from None
        return value

    def _current_cell(self) -> int:
        """The running cell's number (IPython 9 advances the counter as a cell starts)."""
        return int(self.shell.execution_count) - 1

    def _input(self, number: int) -> str | None:
        """What the user typed in cell ``number``, if the history still holds it.

        The history lists hold one entry per stored cell, the running one last; after ``%reset`` they restart while
        the counter goes on, so an entry is found counting back from the running cell, not by its number."""
        inputs: list[str] = self.shell.history_manager.input_hist_raw
        index = len(inputs) - 1 - (self._current_cell() - number)
        return inputs[index] if 1 <= index < len(inputs) else None

    def _row(self, value: Any) -> tuple[str, str, str]:
        return type_name(value), size_hint(value), one_line(value)

    def _plain(self, value: Any) -> str:
        try:
            data, _ = self.shell.display_formatter.format(value, include={"text/plain"})
            return str(data.get("text/plain", ""))
        except Exception as e:
            return f"<could not show it: {type(e).__name__}>"

    def _describe_error(self, error: BaseException) -> str:
        if isinstance(error, SyntaxError):
            filenames = [error.filename or ""]
        else:
            filenames = [frame.filename for frame in traceback.extract_tb(error.__traceback__)]
        # The outermost cell in the traceback is the one that ran.
        cell = next(((f, n) for f in filenames if (n := cell_number(self.shell, f)) is not None), None)
        text = format_error(error, cell_names(self.shell))
        if cell is not None:
            filename, number = cell
            # As typed, from the history; else (a cell run without storing history) as compiled.
            source = self._input(number) or "".join(linecache.getlines(filename))
            shown = cut(redact_text(source.rstrip()), CELL_INPUT_CHARS)
            text += f"\n\nthe cell that raised it, In [{number}]:\n{shown}"
        return text

