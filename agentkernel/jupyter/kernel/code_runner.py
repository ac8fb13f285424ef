"""Running the agent's code the way a cell runs, in a worker thread that Stop can end, with its outputs captured.

:meth:`CodeRunner.run` takes IPython syntax (``%magics``, ``!commands``, top-level ``await``), runs the statements
in the user namespace and evaluates a final expression as the value — without touching ``In``, ``Out`` or the
execution counter. stdout, stderr, ``display()`` outputs and new matplotlib figures are captured into an
:class:`Execution`, and so is what the process writes to file descriptors 1 and 2 meanwhile (subprocesses,
``os.system``, C extensions: :func:`agentkernel.descriptors.captured`), as stdout and stderr. Exceptions,
``sys.exit()``, ``exit()`` and ``KeyboardInterrupt`` raised by the code become its error; the kernel never exits
because of them.

The code runs in a worker thread, so the kernel's event loop stays free for the Stop button. When the awaiting
call is cancelled (Stop, ``--max-seconds``, the notebook's interrupt) the run returns at once and the thread is
sent an exception with ``PyThreadState_SetAsyncExc``: pure Python code (``while True: pass``) stops within
milliseconds. **Limit**: code blocked inside a C call (``time.sleep(600)``, a long numpy operation, a socket read)
receives it only when that call returns to Python; the thread is abandoned until then (anything it prints
meanwhile goes to the notebook as a worker thread's output does; the descriptors are no longer captured). A
subprocess the code started that writes after the call ended writes to the kernel's log, redacted.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import contextlib
import contextvars
import ctypes
import inspect
import linecache
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import count
from types import CodeType
from typing import Any, Literal

from ...descriptors import captured
from ...record.images import IMAGE_TYPES, encoded_size
from .tracebacks import cell_names, format_error

OutputKind = Literal["stdout", "stderr", "display", "value"]
MAX_CAPTURED_CHARS = 200_000
"""Text kept per stream; code that prints without end cannot fill the kernel's memory."""

_CAPTURE: contextvars.ContextVar[Execution | None] = contextvars.ContextVar("agentkernel_capture", default=None)
_names = count(1)


class CodeAborted(BaseException):
    """Raised inside the code's thread when the run that started it stops (a BaseException: ``except Exception``
    in the code does not swallow it)."""


@dataclass
class Output:
    """One captured output: stream text, or a MIME bundle (``display()`` output or the final value)."""

    kind: OutputKind
    chunks: list[str] = field(default_factory=list)
    """A stream's text as written (joined when read: code may print thousands of times)."""
    data: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.chunks)


@dataclass
class Execution:
    """What one piece of code did: its outputs in order and, if it failed, the error as text."""

    outputs: list[Output] = field(default_factory=list)
    error: str | None = None
    kept: dict[str, int] = field(default_factory=dict)
    """Characters of each stream kept, up to :data:`MAX_CAPTURED_CHARS`."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Characters of each stream not kept beyond :data:`MAX_CAPTURED_CHARS`."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def write(self, kind: Literal["stdout", "stderr"], text: str) -> None:
        with self._lock:  # (the code's thread and the descriptors' reader both write)
            self._write(kind, text)

    def _write(self, kind: Literal["stdout", "stderr"], text: str) -> None:
        room = MAX_CAPTURED_CHARS - self.kept.get(kind, 0)
        if len(text) > room:
            self.dropped[kind] = self.dropped.get(kind, 0) + len(text) - room
            text = text[:room]
        if not text:
            return
        self.kept[kind] = self.kept.get(kind, 0) + len(text)
        if self.outputs and self.outputs[-1].kind == kind:
            self.outputs[-1].chunks.append(text)
        else:
            self.outputs.append(Output(kind, [text]))

    def show(self, kind: Literal["display", "value"], data: dict[str, Any], metadata: dict[str, Any] | None) -> None:
        self.outputs.append(Output(kind, data=data, metadata=metadata or {}))

    @property
    def rich(self) -> list[Output]:
        """The outputs a front end shows richly: display outputs and a value, with more than plain text."""
        return [o for o in self.outputs if o.kind in ("display", "value") and set(o.data) - {"text/plain"}]

    def text(self, notes: Mapping[int, str] | None = None) -> str:
        """What the model reads: streams, each display's text with a placeholder per image, the value, the error.

        ``notes`` (by index in ``outputs``) say what became of an output's image for the model (see
        :func:`describe_bundle`)."""
        parts: list[str] = []
        for index, output in enumerate(self.outputs):
            note = notes.get(index, "") if notes else ""
            if output.kind in ("stdout", "stderr"):
                parts.append(f"[{output.kind}]\n{output.text.rstrip()}")
            elif output.kind == "display":
                parts.append(f"[display] {describe_bundle(output.data, note)}")
            else:
                parts.append(f"[value]\n{describe_bundle(output.data, note)}")
        parts += [f"[{kind}: {n:,} more characters not kept]" for kind, n in self.dropped.items()]
        if self.error is not None:
            parts.append(f"[error]\n{self.error}")
        return "\n".join(parts) if parts else "(the code ran; no output and no value)"


def describe_bundle(data: dict[str, Any], note: str = "") -> str:
    """A MIME bundle as text: ``[image/png 640x480]`` per image, then its text/plain. ``note`` goes into the first
    placeholder, the image the model was offered: ``[image/png 640x480, sent to the model as an image]``."""
    pieces = [image_placeholder(mime, data[mime]) for mime in IMAGE_TYPES if mime in data]
    if note and pieces:
        pieces[0] = f"{pieces[0][:-1]}, {note}]"
    plain = data.get("text/plain")
    if plain:
        pieces.append(str(plain))
    elif not pieces:
        pieces.append(f"[{', '.join(data) or 'empty output'}]")
    return " ".join(pieces)


def image_placeholder(mime: str, payload: Any) -> str:
    """``[image/png 640x480]``: the size is read from a PNG's or GIF's header; other images show their type only."""
    size = encoded_size(mime, payload)
    return f"[{mime} {size[0]}x{size[1]}]" if size else f"[{mime}]"


# -- running ---------------------------------------------------------------------------------------------------


@dataclass
class _Compiled:
    body: CodeType | None
    value: CodeType | None  # the final expression, if the code ends with one (and no ';')
    is_async: bool


class CodeRunner:
    """Runs code for the agent in one shell's user namespace; see the module docstring."""

    def __init__(self, shell: Any):
        self.shell = shell
        self.executed: list[str] = []
        """Every piece of code that started running (compiled, then run), in order."""
        self._prepared: tuple[str, _Compiled] | None = None

    async def run(self, code: str) -> Execution:
        """Run ``code``; cancelling this call abandons the code and interrupts its thread."""
        execution = Execution()
        try:
            compiled = self.compile(code)
        except SyntaxError as e:
            execution.error = format_error(e, cell_names(self.shell))
            return execution
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        context = contextvars.copy_context()  # the cell's context: output from threads the code starts lands there

        def done() -> None:
            if not finished.done():
                finished.set_result(None)

        in_code = threading.Event()  # while set, an abort may (re)send CodeAborted to the thread

        def work() -> None:
            try:
                context.run(self._execute, compiled, execution)
            except BaseException:  # CodeAborted after an abort: nobody waits for this execution any more
                pass
            finally:
                in_code.clear()
                with contextlib.suppress(RuntimeError):  # the kernel's loop is closing
                    loop.call_soon_threadsafe(done)

        thread = threading.Thread(target=work, name="agentkernel-run-python", daemon=True)
        with _routed(self.shell), captured(execution.write):
            in_code.set()  # before the thread starts: a Stop that comes at once must still reach the code
            thread.start()
            self.executed.append(code)
            try:
                await finished
            except asyncio.CancelledError:
                _abort(thread, in_code)
                raise
        return execution

    def prepare(self, code: str) -> list[CodeType]:
        """``code`` compiled now, kept for the :meth:`run` of the same code that follows (the undo journal reads
        what it can reach first); raise SyntaxError."""
        self._prepared = (code, self.compile(code))
        return [c for c in (self._prepared[1].body, self._prepared[1].value) if c is not None]

    def compile(self, code: str) -> _Compiled:
        """Compile IPython syntax into the statements and the final expression; raise SyntaxError."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared[0] == code:
            return prepared[1]
        source = self.shell.transform_cell(code)
        name = f"<agent code {next(_names)}>"
        # Registered with linecache so that tracebacks show the code's lines, as they do for a cell.
        linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
        tree = ast.parse(source, name)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        body = compile(tree, name, "exec", flags=flags) if tree.body else None
        value = compile(last, name, "eval", flags=flags) if last is not None else None
        is_async = any(c is not None and bool(c.co_flags & inspect.CO_COROUTINE) for c in (body, value))
        return _Compiled(body, value, is_async)

    def _execute(self, compiled: _Compiled, execution: Execution) -> None:
        """In the worker thread: run the code with its output routed into ``execution``."""
        _CAPTURE.set(execution)
        figures = _open_figures()
        try:
            if compiled.is_async:
                value = asyncio.run(self._evaluate_async(compiled))
            else:
                value = self._evaluate(compiled)
        except CodeAborted:
            raise
        except BaseException as e:  # SystemExit and KeyboardInterrupt too: the kernel must not die of them
            execution.error = format_error(e, cell_names(self.shell))
            if isinstance(e, SystemExit):
                execution.error += "\n(the code asked to exit; the kernel keeps running)"
        else:
            if value is not None:
                data, metadata = self.shell.display_formatter.format(value)
                execution.show("value", data, metadata)
        try:
            self._show_new_figures(figures, execution)
        except Exception as e:
            execution.write("stderr", f"could not show the figures: {type(e).__name__}: {e}\n")

    def _evaluate(self, compiled: _Compiled) -> Any:
        namespace, local = self.shell.user_global_ns, self.shell.user_ns
        if compiled.body is not None:
            exec(compiled.body, namespace, local)
        return eval(compiled.value, namespace, local) if compiled.value is not None else None

    async def _evaluate_async(self, compiled: _Compiled) -> Any:
        namespace, local = self.shell.user_global_ns, self.shell.user_ns
        value = None
        for code in (compiled.body, compiled.value):
            if code is not None:
                value = eval(code, namespace, local)
                if inspect.iscoroutine(value):
                    value = await value
        return value if compiled.value is not None else None

    def _show_new_figures(self, before: set[int], execution: Execution) -> None:
        """Capture (and close) the matplotlib figures the code opened and did not show, as a cell would show them."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        for number in pyplot.get_fignums():
            if number in before:
                continue
            figure = pyplot.figure(number)
            data, metadata = self.shell.display_formatter.format(figure)
            if "image/png" not in data:  # a backend without IPython's figure formatters (Agg)
                data = dict(data, **{"image/png": _png(figure)})
            execution.show("display", data, metadata)
            pyplot.close(figure)


def _open_figures() -> set[int]:
    pyplot = sys.modules.get("matplotlib.pyplot")
    return set(pyplot.get_fignums()) if pyplot is not None else set()


def _png(figure: Any) -> str:
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _abort(thread: threading.Thread, in_code: threading.Event) -> None:
    """Raise CodeAborted in ``thread`` now, and again for a few seconds while the code goes on (it may catch it)."""

    def send() -> bool:
        if not in_code.is_set() or not thread.is_alive() or thread.ident is None:
            return False
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(CodeAborted))
        return True

    def keep_sending() -> None:
        for _ in range(50):
            time.sleep(0.1)
            if not send():
                return

    if send():
        threading.Thread(target=keep_sending, name="agentkernel-abort", daemon=True).start()


# -- routing output into the capture ----------------------------------------------------------------------------


class _RoutedStream:
    """Stands in for sys.stdout/sys.stderr: writes from a capturing context go to its Execution, others through."""

    def __init__(self, kind: Literal["stdout", "stderr"], original: Any):
        self.kind = kind
        self.original = original

    def write(self, text: str) -> int:
        execution = _CAPTURE.get()
        if execution is None:
            return int(self.original.write(text))
        execution.write(self.kind, str(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if _CAPTURE.get() is None:
            self.original.flush()

    def fileno(self) -> int:
        """In the code: the descriptor it stands for (captured meanwhile); ipykernel's is its log's."""
        return (1 if self.kind == "stdout" else 2) if _CAPTURE.get() is not None else int(self.original.fileno())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


@contextlib.contextmanager
def _routed(shell: Any) -> Iterator[None]:
    """While the code runs: its prints and displays go to the capture; everyone else's go through.

    (``exit()`` in the code raises SystemExit, which the runner catches: during a run the magic binds ``exit`` and
    ``quit`` to ``sys.exit``, see :mod:`agentkernel.jupyter.exits`.)"""
    publisher = shell.display_pub
    original_publish, original_clear = publisher.publish, publisher.clear_output

    def publish(data: dict[str, Any], metadata: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> None:
        execution = _CAPTURE.get()
        if execution is None:
            original_publish(data, metadata, *args, **kwargs)
        else:
            execution.show("display", dict(data), metadata)

    def clear_output(*args: Any, **kwargs: Any) -> None:
        if _CAPTURE.get() is None:
            original_clear(*args, **kwargs)

    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _RoutedStream("stdout", sys.stdout), _RoutedStream("stderr", sys.stderr)
    publisher.publish, publisher.clear_output = publish, clear_output
    try:
        yield
    finally:
        for name in ("publish", "clear_output"):
            vars(publisher).pop(name, None)
        if isinstance(sys.stdout, _RoutedStream):
            sys.stdout = streams[0]
        if isinstance(sys.stderr, _RoutedStream):
            sys.stderr = streams[1]
