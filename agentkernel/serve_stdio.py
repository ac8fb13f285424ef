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


async def bridge(url: str, token: str, refused: list[int] | None = None) -> None:
    """Serve MCP on stdio, passing tool listings and calls on to the session at ``url``; the HTTP statuses of the
    session's refusals (400 and up) are appended to ``refused`` (the SDK's error does not say them)."""
    refused = [] if refused is None else refused
    import httpx2
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def note(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            refused.append(response.status_code)

    # No read timeout: a call may wait for its approval, or for the user's cell, for as long as that takes.
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(30.0, read=None),
                                  event_hooks={"response": [note]}) as http, \
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
    refused: list[int] = []
    try:
        asyncio.run(bridge(args[0], token, refused))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - one line on stderr, whatever failed (the client shows it)
        print(f"agentkernel.serve_stdio: {failure(e, args[0], refused)}", file=sys.stderr)
        return 1
    return 0


def failure(error: BaseException, url: str, refused: list[int]) -> str:
    """What went wrong, in one line: the SDK's task groups wrap the one error that matters (a refused connection,
    a status the session answered, a URL that cannot be reached) in exception groups."""
    leaf = root_cause(error)
    if refused:
        status = refused[-1]
        if status == 401:
            return (f"the session at {url} refused the token (401): {TOKEN_ENV} must hold this session's token "
                    "(a new %agent_serve has a new one)")
        if status == 404:
            return f"nothing answers MCP at {url} (404): give the session's URL as _agent_serve.url has it"
        return f"the session at {url} answered HTTP {status} ({one_line(leaf)})"
    kind = type(leaf).__name__
    if kind in ("InvalidURL", "UnsupportedProtocol"):
        return f"{url!r} is not a URL the bridge can reach ({one_line(leaf)})"
    if kind == "ConnectError":
        return (f"cannot connect to {url} ({one_line(leaf)}): nothing serves there; is the session still on "
                "(_agent_serve.url names it)?")
    if "Timeout" in kind:
        return f"the session at {url} did not answer in time ({kind})"
    return f"cannot reach the session at {url}: {kind}: {one_line(leaf)}"


def root_cause(error: BaseException) -> BaseException:
    """The first error inside ``error``'s exception groups that is not a cancellation (``error`` if none)."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = root_cause(inner)
            if not isinstance(found, (asyncio.CancelledError, BaseExceptionGroup)):
                return found
    return error


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
