"""A stdio bridge to a kernel's ``%agent_serve`` session, for MCP clients that only start stdio servers::

    AGENTKERNEL_TOKEN=<the token in _agent_serve.headers> python -m agentkernel.serve_stdio http://127.0.0.1:PORT/mcp

It speaks MCP on its stdin and stdout and passes every ``tools/list`` and ``tools/call`` on to the session's URL
with the token (read from ``$AGENTKERNEL_TOKEN``, never from the command line, where other users' ``ps`` would see
it), and each call's progress back. The kernel does the rest: approvals, redaction, guards and Stop are the
session's, whichever way a client comes in.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

TOKEN_ENV = "AGENTKERNEL_TOKEN"
USAGE = f"usage: {TOKEN_ENV}=TOKEN python -m agentkernel.serve_stdio URL   (URL and TOKEN: _agent_serve.url and " \
        "the token in _agent_serve.headers)"


async def bridge(url: str, token: str) -> None:
    """Serve MCP on stdio, passing tool listings and calls on to the session at ``url``."""
    import httpx2
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    # No read timeout: a call may wait for its approval, or for the user's cell, for as long as that takes.
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(30.0, read=None)) as http, \
            Client(streamable_http_client(url, http_client=http)) as upstream:

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return await upstream.list_tools()

        async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
            async def progress(progress: float, total: float | None, message: str | None) -> None:
                await ctx.session.report_progress(progress, total, message)

            return await upstream.call_tool(params.name, params.arguments or {}, progress_callback=progress)

        server = Server("agentkernel", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    token = os.environ.get(TOKEN_ENV, "")
    if len(args) != 1 or not args[0].startswith("http"):
        print(USAGE, file=sys.stderr)
        return 2
    if not token:
        print(f"agentkernel.serve_stdio: {TOKEN_ENV} is not set\n{USAGE}", file=sys.stderr)
        return 2
    try:
        asyncio.run(bridge(args[0], token))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - one line on stderr, whatever failed (the client shows it)
        print(f"agentkernel.serve_stdio: cannot reach the session at {args[0]}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
