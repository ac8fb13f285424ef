"""The stdio bridge (``python -m agentkernel.serve_stdio URL``) run as a client starts it, against a served session
on this test's event loop: whatever fails (a closed port, a wrong token, a wrong path, a URL that is not one) is one
line on stderr saying what, never an exception group, and never the token."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys

import pytest

from agentkernel.mcp.serving import MCPHTTPServer
from agentkernel.mcp.session import ServedSession
from agentkernel.serve_stdio import TOKEN_ENV

pytest.importorskip("mcp")


async def bridge(url: str, token: str) -> tuple[int, str, str]:
    """Run the bridge as an MCP client would start it (no input: it ends when it has nothing to pass on)."""
    env = {**os.environ, TOKEN_ENV: token}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentkernel.serve_stdio", url, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["closed port", "wrong token", "wrong path", "bad port", "no such host"])
def test_each_failure_is_one_line_saying_what(case: str):
    token_given = "not-the-token-0123456789abcdef"

    async def main() -> None:
        server = MCPHTTPServer(ServedSession([]))
        await server.start()
        try:
            url, token = {
                "closed port": (f"http://127.0.0.1:{closed_port()}/mcp", server.token),
                "wrong token": (server.url, token_given),
                "wrong path": (server.url.removesuffix("/mcp") + "/elsewhere", server.token),
                "bad port": ("http://127.0.0.1:notaport/mcp", server.token),
                "no such host": ("http://no-such-host.invalid/mcp", server.token),
            }[case]
            code, out, err = await bridge(url, token)
        finally:
            await server.stop()
        expected = {"closed port": "cannot connect to", "wrong token": "refused the token (401)",
                    "wrong path": "nothing answers MCP at", "bad port": "is not a URL the bridge can reach",
                    "no such host": "cannot connect to"}[case]
        assert code == 1 and out == ""
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("agentkernel.serve_stdio: ") and expected in lines[0], err
        assert url in lines[0] or repr(url) in lines[0]
        assert "ExceptionGroup" not in err and "TaskGroup" not in err and "Traceback" not in err
        assert server.token not in err and token_given not in err
        if case == "wrong token":
            assert server.rejected >= 1 and server.session.calls == []

    asyncio.run(asyncio.wait_for(main(), 120))


def test_a_working_bridge_ends_quietly_when_its_client_closes_stdin():
    async def main() -> None:
        server = MCPHTTPServer(ServedSession([]))
        await server.start()
        try:
            code, out, err = await bridge(server.url, server.token)
        finally:
            await server.stop()
        assert code == 0 and err == "", err

    asyncio.run(asyncio.wait_for(main(), 120))
