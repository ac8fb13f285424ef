"""Reading text files and matching a regular expression against their lines: the child process of a search.

:mod:`agentkernel.tools.file_search` runs this file as a script (``python -I -S file_reading.py KERNEL_PID
CPU_SECONDS``): it ends when its kernel does, even a kernel killed with SIGKILL, and after ``CPU_SECONDS`` of CPU
whatever happens (:func:`bound`). It reads one JSON job from stdin and writes one JSON record per line to stdout
(``{"file": i}`` when it starts file ``i``, ``{"match": [i, line_number, text]}``, ``{"skip": i, "why": "..."}``),
flushing each, so nothing found before the process is killed is lost. It imports only a few standard modules, so
that it starts fast (about 10 ms of CPU), and nothing from agentkernel; the file tools use its readers too.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Iterator

SNIFF_BYTES = 8192
"""A NUL byte among a file's first bytes marks it as binary."""


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


def scan(job: dict) -> Iterator[dict]:  # bare dicts: importing typing would slow the start
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


def bound(parent: int, cpu_seconds: int) -> None:
    """End with process ``parent`` (as :func:`agentkernel.tether.die_with`: on Linux, SIGKILL when it dies, which
    this script, importing nothing of agentkernel, asks itself), and after ``cpu_seconds`` of CPU time (SIGXCPU)."""
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
        if os.getppid() != parent:  # it died before the prctl
            sys.exit(1)


def main() -> None:
    if len(sys.argv) == 3:
        bound(int(sys.argv[1]), int(sys.argv[2]))
    job = json.load(sys.stdin)
    for record in scan(job):
        print(json.dumps(record), flush=True)  # ASCII escapes: the pipe's encoding cannot matter


if __name__ == "__main__":
    main()
