"""Our own child processes end with the kernel, even when the kernel is killed outright (SIGKILL).

A child process outlives its parent by default: killed with SIGKILL, a kernel runs no cleanup, and a search child
stuck in a catastrophic regular expression, or an MCP server in the middle of a call, spins on. On Linux the child
asks the operating system for a signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``; :func:`die_with`, called
in the child itself, since ``preexec_fn`` is unsafe in a kernel with threads).

An MCP stdio server is any program, started by the mcp SDK (in a session of its own, whose process group the SDK
kills when it stops the server), so it is started through this file run as a script, its *tether*
(:func:`tethered`): ``python -I -S tether.py KERNEL_PID COMMAND [ARG...]``. The tether starts the command in the
tether's own process group, handing it its pipes, and waits for it. When the kernel dies it gets SIGTERM and kills the
whole group with SIGKILL: the server and whatever the server started (``npx`` starts the server as its grandchild).
When the tether itself is killed, the server gets SIGKILL. Elsewhere than Linux the command runs untethered.

Run as a script it imports only standard modules, and nothing of agentkernel.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with(parent: int, signum: int = signal.SIGKILL) -> bool:
    """Have Linux send ``signum`` to this process when its parent (the thread that started it) ends; False when the
    parent, process ``parent``, is gone already. Elsewhere than Linux nothing is done (True)."""
    if sys.platform != "linux":
        return True
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    return os.getppid() == parent  # checked after the prctl: a parent that died before it sends nothing


def tethered(command: list[str]) -> list[str]:
    """``command`` run through its tether (on Linux), so that it ends with this process."""
    if sys.platform != "linux" or not sys.executable:
        return command
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), *command]


def main(argv: list[str]) -> int:
    parent, command = int(argv[0]), argv[1:]
    if os.getpgrp() != os.getpid():  # killpg(0) below must reach our group only, never the kernel's
        os.setpgid(0, 0)

    def parent_died(signum: int, frame: object) -> None:
        if os.getppid() != parent:  # else the SIGTERM came from the SDK stopping the group: the command has it too
            os.killpg(0, signal.SIGKILL)

    signal.signal(signal.SIGTERM, parent_died)
    if not die_with(parent, signal.SIGTERM):
        return 1
    try:
        child = subprocess.Popen(command, preexec_fn=lambda: die_with(os.getppid()))  # one thread here: safe
    except OSError as e:
        print(f"agentkernel: cannot start {command[0]}: {e.strerror or e}", file=sys.stderr, flush=True)
        return 127
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
