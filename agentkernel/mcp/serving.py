"""Serving a :class:`~agentkernel.mcp.session.ServedSession`'s tools over MCP: the official ``mcp`` SDK's server side,
the Streamable HTTP transport on 127.0.0.1, on the running event loop (a kernel's: it goes on serving between
cells).

Every request must carry the session's bearer token (``Authorization: Bearer <token>``): without it the answer is
401 and nothing runs. ``Host`` must name the server's own address and port, and an ``Origin``, when sent, must be
that same address (the MCP specification's defence against DNS rebinding: a web page cannot reach the server by
renaming it). Tools are listed with ``readOnlyHint`` and ``destructiveHint`` as they are; a call's result is the
runner's (redacted, cut), its images as image content, and a failure, a denial or a refusal as an error result.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import AgentConfigError
from ..tools import Tool, ToolResult
from .server import INSTALL_HINT

if TYPE_CHECKING:
    from .session import ServedSession

HOST = "127.0.0.1"
PATH = "/mcp"


def annotations_of(tool: Tool) -> dict[str, Any]:
    """A tool's MCP annotations, stated as they are: read-only or not; destructive unless it only adds or is known
    not to (a tool nobody described may do anything)."""
    if tool.read_only:
        return {"readOnlyHint": True, "destructiveHint": False}
    return {"readOnlyHint": False, "destructiveHint": tool.name != "add_cell"}


@dataclass
class MCPHTTPServer:
    """Serve ``session`` at ``http://127.0.0.1:<port>/mcp`` (a free port unless ``port``) behind a bearer token."""

    session: ServedSession
    port: int = 0
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    name: str = "agentkernel"
    instructions: str = ""
    rejected: int = 0
    """Requests answered 401 (no token, a wrong one)."""
    on_change: Callable[[], None] | None = None
    """Told when a client is seen for the first time, and when a request is refused (for a live view)."""

    def __post_init__(self) -> None:
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def clients(self) -> dict[str, float]:
        """The clients that listed or called tools (name and version, as each says), with when each was last seen."""
        return self.session.clients

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}{PATH}"

    @property
    def headers(self) -> dict[str, str]:
        """What a client must send with every request."""
        return {"Authorization": f"Bearer {self.token}"}

    async def start(self) -> None:
        """Bind the port and start serving on the running event loop; AgentConfigError if that cannot be done."""
        try:
            import uvicorn
            from mcp.server.lowlevel import Server
            from mcp.server.transport_security import TransportSecuritySettings
        except ImportError:
            raise AgentConfigError(INSTALL_HINT) from None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, self.port))
        except OSError as e:
            sock.close()
            raise AgentConfigError(f"cannot serve on {HOST}:{self.port} ({e.strerror or e}): choose another --port, "
                                   "or leave it out for a free one") from None
        self.port = sock.getsockname()[1]
        server = Server(self.name, instructions=self.instructions or None,
                        on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        own = [f"{HOST}:{self.port}", f"localhost:{self.port}"]
        app = server.streamable_http_app(
            streamable_http_path=PATH, host=HOST,
            transport_security=TransportSecuritySettings(
                enable_dns_rebinding_protection=True, allowed_hosts=own,
                allowed_origins=[f"http://{host}" for host in own]))
        config = uvicorn.Config(self._guard(app), log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self.session.start()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._own(server, sock, ready))
        try:
            await ready
        except Exception as e:
            await self.stop()
            raise AgentConfigError(f"the MCP server on {HOST}:{self.port} did not start ({e})") from None

    async def _own(self, server: Any, sock: socket.socket, ready: asyncio.Future[None]) -> None:
        """The owner task: the SDK's session manager is entered and left here (its task group must be), and the
        HTTP server runs inside it until :meth:`stop`."""
        try:
            async with server.session_manager.run():
                # Server.serve() would take over SIGINT and SIGTERM for as long as it serves: the kernel's interrupt
                # is not ours to take, so the serving loop runs without that wrapper.
                serving = asyncio.ensure_future(self._server._serve(sockets=[sock]))
                while not self._server.started and not serving.done():
                    await asyncio.sleep(0.01)
                if serving.done():
                    serving.result()
                    raise RuntimeError("the HTTP server ended at once")
                ready.set_result(None)
                await serving
        except BaseException as e:  # noqa: BLE001 - handed to the starter, else the end of serving
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
            elif not isinstance(e, Exception):
                raise
        finally:
            sock.close()

    async def stop(self) -> None:
        """End the session and stop serving (the calls in flight get their error results first)."""
        self.session.end(self.session.ended or "stopped")
        if self._server is not None:
            self._server.should_exit = True
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 5)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self.session.close()

    @property
    def serving(self) -> bool:
        return self._task is not None and not self._task.done()

    # -- HTTP -----------------------------------------------------------------------------------------------------

    def _guard(self, app: Any) -> Any:
        """``app`` behind the bearer token: a request without it gets 401 before the MCP app sees it."""
        expected = f"Bearer {self.token}".encode()

        async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                given = dict(scope.get("headers") or []).get(b"authorization", b"")
                if not hmac.compare_digest(given, expected):
                    self.rejected += 1
                    if self.on_change is not None:
                        self.on_change()
                    body = json.dumps({"error": "unauthorized: send the session's Authorization header "
                                                "(_agent_serve.headers in the notebook)"}).encode()
                    await send({"type": "http.response.start", "status": 401,
                                "headers": [(b"content-type", b"application/json"),
                                            (b"www-authenticate", b'Bearer realm="agentkernel"')]})
                    await send({"type": "http.response.body", "body": body})
                    return
            await app(scope, receive, send)

        return guarded

    # -- MCP ------------------------------------------------------------------------------------------------------

    def _seen(self, ctx: Any) -> None:
        info = (ctx.meta or {}).get("io.modelcontextprotocol/clientInfo") if isinstance(ctx.meta, dict) else None
        params = getattr(ctx.session, "client_params", None)
        if info is None and params is not None:
            info = params.client_info.model_dump()
        if isinstance(info, dict):
            name = f"{info.get('name', '?')} {info.get('version', '')}".strip()
            if self.session.seen(name) and self.on_change is not None:
                self.on_change()

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        import mcp_types as types

        self._seen(ctx)

        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description, input_schema=t.parameters,
                       annotations=types.ToolAnnotations.model_validate(annotations_of(t)))
            for t in self.session.tools])

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        self._seen(ctx)
        async def progress(seconds: float, message: str) -> None:
            await ctx.session.report_progress(seconds, None, message)

        arguments = json.dumps(params.arguments or {}, ensure_ascii=False)
        result = await self.session.call(params.name, arguments, progress)
        return call_result(result)


def call_result(result: ToolResult) -> Any:
    """A runner's result as an MCP ``CallToolResult``: its text, its images; an error unless it ran and succeeded."""
    import mcp_types as types

    content: list[Any] = [types.TextContent(type="text", text=result.output)]
    for image in result.images:
        content.append(types.ImageContent(type="image", data=image["data"], mime_type=image["media_type"]))
    return types.CallToolResult(content=content, is_error=result.status != "ok")
