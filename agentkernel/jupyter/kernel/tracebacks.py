"""Tracebacks as the kernel tools show them: the frames of the user's code only, cells named ``Cell In[3]``.

The user's code is everything but the Python installation (standard library, site-packages: pandas, IPython,
...) and agentkernel itself: notebook cells, code run by ``run_python``, and the user's own modules.
"""

from __future__ import annotations

import re
import site
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ...secrets import redact_text
from ...text import short

MAX_FRAMES = 30
_PACKAGE = str(Path(__file__).resolve().parent.parent)
_INSTALLED = tuple({str(Path(p).resolve()) for p in (
    *site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["stdlib"],
    sysconfig.get_paths()["platstdlib"], sys.prefix, sys.base_prefix)} | {_PACKAGE})

Rename = Callable[[str], str]
"""Maps a code filename to the name shown (a cell's temporary file to ``Cell In[3]``)."""


def cell_number(shell: Any, filename: str) -> int | None:
    """The execution count of the notebook cell whose code has this filename, else None."""
    label = shell.compile.format_code_name(filename)
    match = re.fullmatch(r"In\[(\d+)\]", label[1]) if label else None
    return int(match.group(1)) if match else None


def cell_names(shell: Any) -> Rename:
    """A :data:`Rename` that shows a cell's code as ``Cell In[3]`` and other files as they are."""

    def rename(filename: str) -> str:
        number = cell_number(shell, filename)
        return filename if number is None else f"Cell In[{number}]"

    return rename


def is_user_file(filename: str) -> bool:
    """False for frozen modules, the Python installation and agentkernel; True for cells and the user's files."""
    if filename.startswith("<"):
        return not filename.startswith("<frozen")
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return True
    return not path.startswith(_INSTALLED)


def user_frames(tb: TracebackType | None, rename: Rename) -> list[traceback.FrameSummary]:
    """The frames of the user's code in ``tb``, renamed, at most :data:`MAX_FRAMES` (the middle left out)."""
    frames = [frame for frame in traceback.extract_tb(tb) if is_user_file(frame.filename)]
    for frame in frames:
        frame.filename = rename(frame.filename)
    if len(frames) > MAX_FRAMES:
        frames = [*frames[:10], *frames[-(MAX_FRAMES - 10):]]
    return frames


def format_error(error: BaseException, rename: Rename) -> str:
    """The error's type and message, then the traceback of the user's frames (a SyntaxError: where it is)."""
    if isinstance(error, SyntaxError):  # raised compiling: the place is in the error, not in frames
        where = rename(error.filename or "?")
        lines = [f"{type(error).__name__}: {error.msg}", f'  File "{where}", line {error.lineno}',
                 f"    {(error.text or '').strip()}"]
    else:
        lines = [f"{type(error).__name__}: {error}".rstrip().rstrip(":")]
        frames = user_frames(error.__traceback__, rename)
        if frames:
            lines += ["Traceback (most recent call last):",
                      "".join(traceback.StackSummary.from_list(frames).format()).rstrip()]
    cause = error.__cause__ or error.__context__
    if cause is not None and not error.__suppress_context__:
        lines.append(f"(raised while handling {type(cause).__name__}: {short(redact_text(str(cause)), 300)})")
    return "\n".join(lines)
