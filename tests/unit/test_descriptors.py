"""Capturing file descriptors 1 and 2 (:mod:`agentkernel.descriptors`) in this process: what a child or ``os.write``
puts there reaches the capture whole and in order, the descriptors are restored on every way out, overlapping
captures share one redirection, and a child that outlives its capture writes to the process's log, redacted."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from secret_pieces import leaked

from agentkernel import descriptors
from agentkernel.descriptors import captured

REPO = Path(__file__).resolve().parents[2]


class Heard:
    def __init__(self) -> None:
        self.texts: dict[str, str] = {"stdout": "", "stderr": ""}

    def __call__(self, name: descriptors.StreamName, text: str) -> None:
        self.texts[name] += text


def identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


@contextmanager
def unchanged_descriptors() -> Iterator[None]:
    before = identity(1), identity(2)
    yield
    assert (identity(1), identity(2)) == before
    assert descriptors._active is None


def test_a_child_and_os_write_reach_the_capture_each_in_its_stream() -> None:
    heard = Heard()
    with unchanged_descriptors(), captured(heard):
        os.write(1, b"one\n")
        os.write(2, b"two\n")
        subprocess.run("echo child out; echo child err >&2", shell=True, check=True)
        os.system("echo system")
    assert heard.texts == {"stdout": "one\nchild out\nsystem\n", "stderr": "two\nchild err\n"}


def test_the_descriptors_are_restored_when_the_block_raises() -> None:
    heard = Heard()
    with unchanged_descriptors(), pytest.raises(KeyError), captured(heard):
        os.write(2, b"before the error\n")
        raise KeyError("x")
    assert heard.texts["stderr"] == "before the error\n"


@settings(max_examples=40, deadline=None)
@given(text=st.text(st.characters(exclude_categories=("Cs",)), max_size=300),
       cuts=st.lists(st.integers(min_value=0, max_value=1200), max_size=12),
       streams=st.lists(st.sampled_from([1, 2]), min_size=1, max_size=13))
def test_text_cut_anywhere_into_writes_arrives_whole_and_in_order(text: str, cuts: list[int],
                                                                    streams: list[int]) -> None:
    """Cut at any byte (inside a UTF-8 character too) and spread over both descriptors: each stream hears exactly its
    bytes, decoded as one text (so redaction later sees a secret whole, however it was written)."""
    data = text.encode()
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    sent: dict[int, bytes] = {1: b"", 2: b""}
    heard = Heard()
    with unchanged_descriptors(), captured(heard):
        for i, piece in enumerate(pieces):
            fd = streams[i % len(streams)]
            os.write(fd, piece)
            sent[fd] += piece
    assert heard.texts["stdout"] == sent[1].decode(errors="replace")
    assert heard.texts["stderr"] == sent[2].decode(errors="replace")


def test_overlapping_captures_share_one_redirection_and_restore_when_the_last_ends() -> None:
    first, second = Heard(), Heard()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with captured(second):
            inside.set()
            release.wait(30)
            os.write(1, b"only the second\n")

    with unchanged_descriptors():
        thread = threading.Thread(target=other)
        with captured(first):
            thread.start()
            assert inside.wait(30)
            os.write(1, b"both\n")
        assert descriptors._active is not None  # the second still captures
        release.set()
        thread.join(30)
    assert first.texts["stdout"] == "both\n"
    assert second.texts["stdout"] == "both\nonly the second\n"


def test_a_child_that_never_stops_writing_does_not_hold_the_capture_open() -> None:
    heard = Heard()
    start = time.monotonic()
    with unchanged_descriptors(), captured(heard):
        child = subprocess.Popen(["yes", "endless"], stderr=subprocess.DEVNULL)
        while "endless" not in heard.texts["stdout"]:
            assert time.monotonic() - start < 30
            time.sleep(0.01)
    ended = time.monotonic() - start
    child.kill()
    child.wait()
    assert ended < descriptors.DRAIN_SECONDS + 10


LATE = """\
import subprocess, sys, threading
from agentkernel.descriptors import captured
heard = []
with captured(lambda name, text: heard.append(text)):
    print("in the capture", flush=True)
    child = subprocess.Popen("read line; echo late $LATE_TOKEN; echo late err $LATE_TOKEN >&2", shell=True,
                             stdin=subprocess.PIPE)
child.communicate(b"go\\n")
for thread in threading.enumerate():  # (its reader sends what the child wrote to the log; a kernel lives on)
    if thread.name == "agentkernel-descriptors":
        thread.join(30)
sys.stderr.write(f"heard {heard!r}\\n")
"""


def test_a_child_that_writes_after_the_capture_writes_to_the_process_log_redacted() -> None:
    token = "late-" + "Qx7" * 8
    env = {**os.environ, "LATE_TOKEN": token, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", LATE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "heard ['in the capture\\n']" in done.stderr
    assert "late [secret $LATE_TOKEN]\n" in done.stdout and "late err [secret $LATE_TOKEN]\n" in done.stderr
    assert leaked(token, done.stdout + done.stderr) is None


def test_the_process_log_is_the_descriptor_ipykernel_kept() -> None:
    """In a kernel, ipykernel's streams keep the process's original descriptor: the log writes there, not to 2."""
    read, write = os.pipe()

    class KernelStream:
        _original_stdstream_copy = write

    saved = sys.stderr
    descriptors._logs.pop("stderr", None)
    try:
        sys.stderr = KernelStream()  # type: ignore[assignment]
        log = descriptors.process_log("stderr")
    finally:
        sys.stderr = saved
        descriptors._logs.pop("stderr", None)
    log.write("to the log\n")
    log.close()
    os.close(write)
    assert os.read(read, 100) == b"to the log\n"
    os.close(read)
