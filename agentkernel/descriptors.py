"""The process's file descriptors 1 and 2: capturing what code writes to them, and the process's own log.

In a Jupyter kernel, ipykernel points descriptors 1 and 2 at pipes of its own and forwards what arrives into
whichever cell ran last: a subprocess's output, ``os.system``, a C extension's ``printf``, ``sys.__stderr__``. Two
things here keep that from showing what it should not:

- :func:`captured` points descriptors 1 and 2 at pipes of ours for as long as a piece of the agent's code runs
  (``run_python``), so what the code's children and C calls write becomes part of that code's output, as a cell
  would show it, and goes where its prints go (to be redacted with the call's result) instead of raw into a cell.
- :func:`process_log` is a stream on the process's own stdout or stderr (the kernel's: the terminal that started it,
  or the Jupyter server's log), never a cell: for what agentkernel itself has to say outside a run (the trace
  exporter's messages).

Overlapping captures (two pieces of code running at once) share one redirection: what the descriptors receive
meanwhile goes to every capture open at that moment. What the code's children write after the capture ends (a
background process still running) goes to the process's log, redacted line by line, never into a cell.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import os
import selectors
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal, TextIO

from .secrets import KERNEL

StreamName = Literal["stdout", "stderr"]
Sink = Callable[[StreamName, str], None]
"""Receives the text one stream got (decoded as UTF-8, errors replaced), in order, from a reader thread."""

FDS: dict[StreamName, int] = {"stdout": 1, "stderr": 2}
DRAIN_SECONDS = 1.0
"""How long the end of a capture waits for what is already in the pipes (a child that never stops writing must not
keep the call from ending)."""
LOG_LINE_CHARS = 65_536
"""A background child's text goes to the log by lines; a longer run without a newline goes as it is."""

_lock = threading.Lock()
_active: _Redirect | None = None
_logs: dict[StreamName, TextIO] = {}


def supported() -> bool:
    """Whether descriptors can be captured here (POSIX, as ipykernel's own capture)."""
    return os.name == "posix"


@contextlib.contextmanager
def captured(sink: Sink) -> Iterator[None]:
    """Send what the process writes to descriptors 1 and 2 to ``sink`` while the block runs; restore them on every
    way out (an error, a cancellation). At the end, what is already in the pipes reaches ``sink`` first."""
    if not supported():
        yield
        return
    redirect = _enter(sink)
    try:
        yield
    finally:
        _leave(redirect, sink)


def process_log(name: StreamName) -> TextIO:
    """The process's own ``name`` stream (line-buffered): a kernel's terminal or the Jupyter server's log, where a
    cell never shows it. ipykernel keeps the original descriptor as ``_original_stdstream_copy`` of its stream."""
    with _lock:
        stream = _logs.get(name)
        if stream is None:
            fd = _original_fd(name)
            stream = _logs[name] = open(os.dup(fd), "w", encoding="utf-8", errors="replace", buffering=1)  # noqa: SIM115
        return stream


def _original_fd(name: StreamName) -> int:
    """(Under ``_lock``.) ipykernel's saved descriptor; else what the descriptor was before a capture; else it."""
    kept = getattr(getattr(sys, name), "_original_stdstream_copy", None)
    if isinstance(kept, int):
        return kept
    if _active is not None:
        return _active.saved[FDS[name]]
    return FDS[name]


class _Redirect:
    """Descriptors 1 and 2 pointed at two pipes, and the thread that reads them."""

    def __init__(self) -> None:
        self.sinks: list[Sink] = []
        self.saved: dict[int, int] = {}
        self.reads: dict[int, StreamName] = {}
        self.wake_read, self.wake_write = os.pipe()
        self.waiting: list[threading.Event] = []
        self.finished = False
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in FDS}
        self.lines: dict[StreamName, str] = {"stdout": "", "stderr": ""}
        for name, fd in FDS.items():
            read, write = os.pipe()
            self.saved[fd] = os.dup(fd)
            os.dup2(write, fd)
            os.close(write)  # (the descriptor itself is now the pipe's only writer here)
            self.reads[read] = name
        self.thread = threading.Thread(target=self._read, name="agentkernel-descriptors", daemon=True)
        self.thread.start()

    def restore(self) -> None:
        """Point the descriptors back; the pipes stay open while children that inherited them still write."""
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)
            os.close(saved)

    def drain(self) -> None:
        """Return once what the pipes held when asked has gone to the sinks (or :data:`DRAIN_SECONDS` passed)."""
        event = threading.Event()
        with _lock:  # (the reader closes the wake pipe under it)
            if self.finished:
                return
            self.waiting.append(event)
            os.write(self.wake_write, b".")
        event.wait(DRAIN_SECONDS + 1)

    # -- the reader thread ----------------------------------------------------------------------------------------

    def _read(self) -> None:
        selector = selectors.DefaultSelector()
        for fd in self.reads:
            selector.register(fd, selectors.EVENT_READ)
        selector.register(self.wake_read, selectors.EVENT_READ)
        try:
            while self.reads:
                for key, _ in selector.select():
                    if key.fd == self.wake_read:
                        os.read(self.wake_read, 512)
                    else:
                        self._take(key.fd, selector)
                if self.waiting:
                    self._empty(selector)
        finally:
            selector.close()
            with _lock:
                self.finished = True
                os.close(self.wake_read)
                os.close(self.wake_write)
            self._release()

    def _empty(self, selector: selectors.BaseSelector) -> None:
        """Read what the pipes hold now, then wake those waiting for it."""
        deadline = time.monotonic() + DRAIN_SECONDS
        while self.reads and time.monotonic() < deadline:
            ready = [key.fd for key, _ in selector.select(0) if key.fd in self.reads]
            if not ready:
                break
            for fd in ready:
                self._take(fd, selector)
        for name, decoder in self.decoders.items():  # (a character cut at the end of the code's output: as is)
            if text := decoder.decode(b"", final=True):
                self._send(name, text, final=False)
        self._release()

    def _release(self) -> None:
        with _lock:
            waiting, self.waiting = self.waiting, []
        for event in waiting:
            event.set()

    def _take(self, fd: int, selector: selectors.BaseSelector) -> None:
        name = self.reads[fd]
        try:
            data = os.read(fd, 65_536)
        except OSError:
            data = b""
        if not data:
            selector.unregister(fd)
            os.close(fd)
            del self.reads[fd]
        text = self.decoders[name].decode(data, final=not data)
        if text or not data:
            self._send(name, text, final=not data)

    def _send(self, name: StreamName, text: str, final: bool) -> None:
        with _lock:  # (so that no sink hears anything once its capture has ended)
            for sink in self.sinks:
                with contextlib.suppress(Exception):  # (a sink's fault must not stop the reading)
                    sink(name, text)
            if self.sinks:
                return
        self._log(name, text, final)

    def _log(self, name: StreamName, text: str, final: bool) -> None:
        """What arrives with no capture open (a background child): to the process's log, redacted, by lines."""
        pending = self.lines[name] + text
        cut = len(pending) if final or len(pending) > LOG_LINE_CHARS else pending.rfind("\n") + 1
        self.lines[name] = pending[cut:]
        if cut:
            with contextlib.suppress(OSError, ValueError):
                log = process_log(name)
                log.write(KERNEL.current.redact(pending[:cut]))
                log.flush()


def _enter(sink: Sink) -> _Redirect:
    global _active
    for name in FDS:
        process_log(name)  # (its descriptor found before ours replace 1 and 2, where ipykernel keeps none)
    with _lock:
        if _active is None:
            _flush()
            _active = _Redirect()
        _active.sinks.append(sink)
        return _active


def _leave(redirect: _Redirect, sink: Sink) -> None:
    global _active
    _flush()
    redirect.drain()
    with _lock:
        redirect.sinks.remove(sink)
        if redirect.sinks or _active is not redirect:
            return
        _active = None
        redirect.restore()  # (the reader sees the pipes end once no child holds them, and ends)


def _flush() -> None:
    """Push out what C's stdio and Python's own file objects on 1 and 2 hold, so it is read before a restore."""
    for stream in (sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    with contextlib.suppress(Exception):
        ctypes.pythonapi.fflush(None)  # (the process's C library, as a cell's C extension uses it)
