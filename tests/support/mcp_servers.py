"""The real MCP servers the MCP tests start, installed by scripts/test.sh (no network at test time):
``mcp-server-time`` and ``mcp-server-git`` from PyPI, ``@modelcontextprotocol/server-everything`` from npm into
``tests/mcp/node_modules``. Outside CI a missing server skips the tests that need it; under CI it fails them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

EVERYTHING = (Path(__file__).parents[1] / "mcp" / "node_modules" / "@modelcontextprotocol" / "server-everything"
              / "dist" / "index.js")
TZ_CALL = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}


def need(*commands: str, everything: bool = False) -> None:
    """Skip (fail under CI) unless the servers are installed."""
    missing = [c for c in commands if shutil.which(c) is None]
    if everything and (shutil.which("node") is None or not EVERYTHING.is_file()):
        missing.append(str(EVERYTHING))
    if missing:
        message = f"MCP test servers not installed ({', '.join(missing)}): run scripts/test.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    pytest.importorskip("mcp")


def git_repository(path: Path) -> Path:
    """A temporary repository with one commit and one untracked file."""
    path.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(path), "-c", "user.email=test@example.com", "-c", "user.name=test"]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "notes.txt").write_text("first line\n")
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    (path / "draft.txt").write_text("not yet added\n")
    return path


def servers(repo: Path, **extra: dict[str, Any]) -> dict[str, Any]:
    """The ``mcpServers`` configuration of the tests' servers (``extra``: more entries)."""
    return {"mcpServers": {
        "time": {"command": "mcp-server-time", "trustAnnotations": True},
        "clock": {"command": "mcp-server-time"},  # the same server, its annotations not trusted
        "git": {"command": "mcp-server-git", "args": ["--repository", str(repo)], "trustAnnotations": True},
        "everything": {"command": "node", "args": [str(EVERYTHING)], "trustAnnotations": True,
                       "env": {"AGENTKERNEL_TEST_MARK": "from-the-entry"}},
        "hang": {"command": "python", "args": ["-c", "import time; time.sleep(600)  # agentkernel-hang"],
                 "startupTimeout": 2},
        "missing": {"command": "agentkernel-no-such-command"},
        **extra,
    }}


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(json.dumps(config, indent=2))
    return path


def processes(marker: str) -> list[int]:
    """The pids of live processes whose command line holds ``marker`` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z" and entry.name != str(os.getpid()):
            found.append(int(entry.name))
    return found


def ended(marker: str, within: float = 10.0) -> bool:
    """Whether every process whose command line holds ``marker`` ends within ``within`` seconds (a stopped server's
    process may take a moment to exit after its SIGTERM on a loaded machine)."""
    deadline = time.monotonic() + within
    while processes(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
