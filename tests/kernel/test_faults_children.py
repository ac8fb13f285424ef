"""Every child process of ours ends with its kernel, even a kernel killed with SIGKILL.

A kernel is killed outright while its search child spins on a catastrophic regular expression, and while an MCP
server (started through a shell, so that the server is the kernel's grandchild) is in the middle of a call; every
process the kernel had started is then gone within a few seconds, checked by process id (psutil knows a reused id
by its start time). The search child also ends on its own CPU limit when nobody kills it.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from kernel_client import KernelSession, agent_kernel
from timing import wait_until

from agentkernel.tools import file_reading

GONE_WITHIN = 5.0  # seconds: a killed kernel's children are gone within this (the search's own limits are longer)
CATASTROPHIC = "(a+)+$"  # backtracks for minutes over a line of 40 "a"s and a "!"
SLEEPER = """\
import time
from mcp.server.mcpserver import MCPServer

server = MCPServer("sleeper")


@server.tool(description="Wait a minute")
def wait_a_minute() -> str:
    open("called", "w").close()
    time.sleep(60)
    return "waited"


server.run("stdio")
"""


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[KernelSession]:
    with agent_kernel(tmp_path, {"evil.txt": "a" * 40 + "!\n", "sleeper.py": SLEEPER}) as ks:
        ks.ok("%autoawait True\n%config AgentMagics.transcripts = False\nfrom agentkernel import Call, ScriptedModel")
        yield ks


def kernel_process(kernel: KernelSession) -> psutil.Process:
    return psutil.Process(kernel.km.provisioner.process.pid)


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(what: str, kernel: psutil.Process, count: int = 1, within: float = 60.0) -> list[psutil.Process]:
    """The kernel's descendants once ``count`` of them have ``what`` in their command line."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = [p for p in kernel.children(recursive=True) if alive(p) and what in " ".join(p.cmdline())]
        if len(found) >= count:
            return kernel.children(recursive=True)
        time.sleep(0.05)
    raise AssertionError(f"no {what!r} among the kernel's processes: {kernel.children(recursive=True)}")


def kill_and_check(kernel: psutil.Process, children: list[psutil.Process]) -> None:
    assert children and all(alive(p) for p in children)
    kernel.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + GONE_WITHIN
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [(p.pid, p.cmdline()) for p in children if alive(p)]
    for p in children:  # never leave one behind, whatever the test found
        if alive(p):
            p.kill()
    assert not left, f"alive {GONE_WITHIN:g} s after the kernel was killed: {left}"


def test_a_killed_kernel_leaves_no_search_child(kernel: KernelSession):
    kernel.ok(f"m = ScriptedModel([Call('search_text', {{'pattern': {CATASTROPHIC!r}, 'path': '.'}}), 'done'])")
    kernel.submit("%%agent -m m\nfind it")
    process = kernel_process(kernel)
    children = wait_for(file_reading.__file__, process)
    (search,) = [p for p in children if alive(p) and file_reading.__file__ in " ".join(p.cmdline())]
    wait_until(lambda: sum(search.cpu_times()[:2]) > 0.2, "the search child well into its backtracking")
    kill_and_check(process, children)


def test_a_killed_kernel_leaves_no_mcp_server_nor_what_it_started(kernel: KernelSession, tmp_path: Path):
    pytest.importorskip("mcp")
    # Through a shell that waits for the server, so that the server is a grandchild of the tether.
    config = {"mcpServers": {"sleeper": {"command": "sh", "args": ["-c", f"{sys.executable} sleeper.py; true"]}}}
    (tmp_path / "cwd" / ".mcp.json").write_text(json.dumps(config))
    kernel.ok("m = ScriptedModel([Call('sleeper__wait_a_minute', {}), 'done'])")
    kernel.submit("%%agent -m m --mcp sleeper --allow-writes\nwait")
    process = kernel_process(kernel)
    children = wait_for("sleeper.py", process, count=2)  # the shell and the server (and the tether)
    deadline = time.monotonic() + 30
    while not (tmp_path / "cwd" / "called").exists():  # the server is in the middle of the call
        assert time.monotonic() < deadline, "the call never reached the server"
        time.sleep(0.05)
    kill_and_check(process, children)


def test_the_search_child_ends_on_its_own_cpu_limit(tmp_path: Path):
    """Nobody kills it (its parent is frozen, say): the child ends after the CPU seconds it was given."""
    evil = tmp_path / "evil.txt"
    evil.write_text("a" * 40 + "!\n")
    job = {"pattern": CATASTROPHIC, "files": [str(evil)], "max_bytes": 10**6, "max_matches": 10, "line_chars": 100}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = subprocess.Popen([sys.executable, "-I", "-S", file_reading.__file__, str(os.getpid()), "1"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        out, _ = child.communicate(json.dumps(job).encode(), timeout=60)
    finally:
        child.kill()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert child.returncode in (-signal.SIGXCPU, -signal.SIGKILL)
    assert json.loads(out.splitlines()[0]) == {"file": 0}  # it had started on the file
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert 0.5 <= used < 2.5, used  # its 1 s of CPU (measured by the tick; the hard limit, a second later, kills)
