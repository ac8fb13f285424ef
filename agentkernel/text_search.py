"""Matching a regular expression against text files line by line, in a child process that a time limit can kill.

Python's ``re`` holds the GIL for the whole of one match, and a pattern such as ``(a+)+$`` backtracks for minutes
over a line of a few dozen ``a``\\ s. Run in a worker thread, such a match still stops every other thread, the
event loop included (measured: a 24-character line froze the loop for 5.4 s, past ``--max-seconds`` and Stop).
Cutting the text into short pieces does not help (the time grows exponentially with a line's length, so no useful
cap on it is safe), and telling slow patterns from fast ones by looking at them is guesswork. So
:func:`search_files` runs the matching in a fresh interpreter (``python -I -S`` on this file: standard library
only, about 20 ms of CPU to start) and kills it when the search runs past its time limit, keeping the matches it
reported until then.

The module is also the script the child runs: it reads one JSON job from stdin and writes one JSON record per
line to stdout (``{"file": i}`` when it starts file ``i``, ``{"match": [i, line_number, text]}``,
``{"skip": i, "why": "..."}``), flushing each, so nothing found before a kill is lost. It imports nothing from
agentkernel: the file tools import from it, never the other way round.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

SNIFF_BYTES = 8192
"""A NUL byte among a file's first bytes marks it as binary."""
POLL_SECONDS = 0.1
"""How often a waiting search looks at its deadline and at its cancel flag."""


def decode_text(data: bytes) -> str:
    """``data`` as UTF-8 text; raise ValueError saying what it is instead (``"a binary file, not text"``)."""
    if b"\0" in data[:SNIFF_BYTES]:
        raise ValueError("a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text (binary?)") from None


def split_lines(text: str) -> list[str]:
    """Lines split at "\\n" only (as a line-by-line file read does), without their line endings."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_text_file(path: str, max_bytes: int) -> str:
    """A regular file's text, read without blocking on a FIFO or a device; ValueError says why it cannot be."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"over the {max_bytes:,}-byte limit")
    return decode_text(data)


# -- the child's side ----------------------------------------------------------------------------------------


def scan(job: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The records of one search job (``pattern``, ``files``, ``max_bytes``, ``max_matches``, ``line_chars``)."""
    regex = re.compile(job["pattern"])
    found = 0
    for index, path in enumerate(job["files"]):
        yield {"file": index}
        try:
            text = read_text_file(path, job["max_bytes"])
        except ValueError as e:
            yield {"skip": index, "why": str(e)}
            continue
        except OSError as e:  # the reason only: the message would hold the absolute path
            yield {"skip": index, "why": f"unreadable ({e.strerror or type(e).__name__})"}
            continue
        for number, line in enumerate(split_lines(text), 1):
            if regex.search(line):
                yield {"match": [index, number, line[: job["line_chars"]]]}
                found += 1
                if found >= job["max_matches"]:
                    return


def main() -> None:
    job = json.load(sys.stdin)
    for record in scan(job):
        print(json.dumps(record), flush=True)  # ASCII escapes: the pipe's encoding cannot matter


# -- the parent's side ---------------------------------------------------------------------------------------


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

    Up to ``max_matches`` matches, each line cut to ``line_chars`` characters; files over ``max_bytes``, binary,
    not UTF-8 or not regular are skipped with the reason. Blocks the calling thread (not the GIL) meanwhile;
    setting ``cancelled`` from another thread ends the search (and the child) within 0.1 s.
    """
    job = {"pattern": pattern, "files": list(files), "max_bytes": max_bytes, "max_matches": max_matches,
           "line_chars": line_chars}
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,  # a kernel interrupt (SIGINT to the group) spares it
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
            outcome.matches.append((index, number, text))
        elif "skip" in record:
            outcome.skipped[record["skip"]] = record["why"]
        elif "file" in record:
            outcome.reached = record["file"]
    return outcome


if __name__ == "__main__":
    main()
