"""Searching text files in a child process that a time limit, or a stopped run, can kill.

Python's ``re`` holds the GIL for the whole of one match, and a pattern such as ``(a+)+$`` backtracks for minutes
over a line of a few dozen ``a``\\ s. Run in a worker thread, such a match still stops every other thread, the
event loop included (measured: a 24-character line froze the loop for 5.4 s, past ``--max-seconds`` and Stop).
Cutting the text into short pieces does not help (the time grows exponentially with a line's length, so no useful
cap on it is safe), and telling slow patterns from fast ones by looking at them is guesswork. So
:func:`search_files` runs the matching (:mod:`agentkernel.tools.file_reading`) in a fresh interpreter and kills it when
the search runs past its time limit, keeping the matches it reported until then. ``benchmarks/search_text.py``
prints what that costs.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..secrets import redact_text
from . import file_reading

POLL_SECONDS = 0.1
"""How often a waiting search looks at its deadline and at its cancel flag."""
CPU_MARGIN = 2
"""Seconds of CPU the search child may use past its time limit before it is killed by its own limit."""


@dataclass
class SearchOutcome:
    """What a search found: matches as ``(file index, line number, line)``, files skipped with the reason."""

    matches: list[tuple[int, int, str]] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)
    timed_out: bool = False
    reached: int = -1
    """Index of the last file the search started on (where a search that timed out was stuck)."""


def search_files(
    pattern: str, files: Sequence[str], *, seconds: float, max_bytes: int, max_matches: int, line_chars: int,
    cancelled: threading.Event | None = None,
) -> SearchOutcome:
    """Search ``files`` for ``pattern`` (already known to compile) in a child process, for at most ``seconds``.

    Up to ``max_matches`` matches, each line cut to ``line_chars`` characters and redacted; files over
    ``max_bytes``, binary, not UTF-8 or not regular are skipped with the reason. Blocks the calling thread (not
    the GIL) meanwhile; setting ``cancelled`` from another thread ends the search (and the child) within 0.1 s.
    """
    if not sys.executable:
        raise RuntimeError("search_text runs its search in a Python process, and sys.executable names none here")
    job = {"pattern": pattern, "files": list(files), "max_bytes": max_bytes, "max_matches": max_matches,
           "line_chars": line_chars}
    # It ends with this process, and has a CPU limit of its own beyond the time limit: it cannot spin on, even if
    # this process is killed or frozen.
    cpu_seconds = math.ceil(seconds) + CPU_MARGIN
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", file_reading.__file__, str(os.getpid()), str(cpu_seconds)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,  # a kernel interrupt (SIGINT to the group) spares it
    )
    outcome = SearchOutcome()
    deadline = time.monotonic() + seconds
    data: bytes | None = json.dumps(job).encode()
    try:
        while True:
            try:
                out, err = child.communicate(data, timeout=min(POLL_SECONDS, max(deadline - time.monotonic(), 0)))
                break
            except subprocess.TimeoutExpired:
                data = None  # the rest of the input is still sent: communicate keeps it between calls
                if time.monotonic() >= deadline or (cancelled is not None and cancelled.is_set()):
                    child.kill()
                    out, err = child.communicate()  # what it wrote before the kill
                    outcome.timed_out = True
                    break
    finally:
        if child.poll() is None:  # the calling thread was interrupted: never leave the child running
            child.kill()
            child.wait()
    if child.returncode == -signal.SIGXCPU:
        outcome.timed_out = True
    if not outcome.timed_out and child.returncode != 0:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
        raise RuntimeError(f"the search process failed: {last[0]}")
    for line in out.decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line cut by the kill
            continue
        if "match" in record:
            index, number, text = record["match"]
            outcome.matches.append((index, number, redact_text(text)))  # whole, before a view squeezes and cuts it
        elif "skip" in record:
            outcome.skipped[record["skip"]] = record["why"]
        elif "file" in record:
            outcome.reached = record["file"]
    return outcome
