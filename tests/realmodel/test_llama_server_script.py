"""``python scripts/llama_server.py`` run by hand: it takes ``--threads N`` and serves until
Ctrl-C or SIGTERM whatever its standard input (``< /dev/null``, ``nohup``, ``&``), as the docs say."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import llama_server
import pytest

pytestmark = pytest.mark.realmodel

SCRIPT = Path(llama_server.__file__)


def started(threads: int, log: Path) -> tuple[subprocess.Popen[str], str]:
    """The script started with its standard input closed (``< /dev/null``); the process and its address."""
    try:
        llama_server.check_installed()
    except llama_server.ServerUnavailable as exc:
        pytest.skip(str(exc))
    with open(log, "w", encoding="utf-8") as log_file:
        process = subprocess.Popen([sys.executable, str(SCRIPT), "--threads", str(threads)], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=log_file, text=True)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 120)
    line = process.stdout.readline() if ready else ""
    assert line.startswith(llama_server.LISTENING), (line, log.read_text()[-2000:])
    return process, line[len(llama_server.LISTENING):].strip()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_it_serves_with_stdin_closed_until_a_signal(tmp_path: Path, stop: signal.Signals):
    process, url = started(2, tmp_path / "server.log")
    try:
        time.sleep(1.5)  # it exited at once here when its standard input was closed
        assert process.poll() is None, "the server stopped though nobody asked it to"
        with urllib.request.urlopen(url + "/props", timeout=10) as response:
            props = json.load(response)
        assert isinstance(props, dict) and props
        process.send_signal(stop)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_threads_is_checked():
    result = subprocess.run([sys.executable, str(SCRIPT), "--threads", "0"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2 and "--threads needs 1 or more" in result.stderr
    help_text = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    assert "--threads N" in help_text
