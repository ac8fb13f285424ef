"""One MCP server, owned by a task of its own, and its tools as ordinary :class:`~agentkernel.tools.Tool` objects.

The SDK's client must be entered and exited in one task (python-sdk #79, #922): :class:`MCPServer` starts an owner
task that enters the client, lists the tools, then waits until it is told to stop, and exits the client there.
Calls are made from whatever task runs them (the loop's); cancelling one (Stop, ``--max-seconds``, the tool's
timeout) makes the SDK send ``notifications/cancelled``. A stdio server's stderr goes to a log file, not to the
notebook's ``sys.stderr`` (python-sdk #156, #1103); its tail is quoted when the server fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import sysconfig
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydantic import create_model

from .._version import __version__
from ..errors import AgentConfigError, describe_error
from ..extras import missing, needs
from ..record.images import images_for_model
from ..secrets import current
from ..tether import tethered
from ..tools import Display, Tool, ToolError, ToolOutput
from ..tools.schemas import Arguments
from .config import MCPConfig, ServerEntry, load_config, parse_config
from .results import Outcome, outcome

INSTALL_HINT = missing("mcp")
MAX_NAME = 64
STOP_TIMEOUT = 10.0
"""Seconds a server gets to stop (the SDK closes stdin, then terminates, then kills, within about 5 s)."""
STDERR_LINES = 10



class MCPToolError(ToolError):
    """A call the server answered with an error (``isError``, or a JSON-RPC error), or a server that is gone."""


def tool_name(server: str, tool: str, taken: set[str]) -> str:
    """``{server}__{tool}`` with characters outside ``[A-Za-z0-9_-]`` replaced by ``_``, at most 64 characters and
    not in ``taken`` (a numbered suffix keeps it distinct); the name is added to ``taken``."""
    base = re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}__{tool}")[:MAX_NAME]
    name, n = base, 1
    while name in taken:
        n += 1
        name = base[: MAX_NAME - len(f"_{n}")] + f"_{n}"
    taken.add(name)
    return name


@dataclass(frozen=True)
class _ServerChecked(Arguments):
    """An MCP tool's arguments: any JSON object (the loop checks that much); the server checks its own schema."""

    def validate(self, arguments: str) -> dict[str, Any]:
        value = json.loads(arguments) if arguments.strip() else {}
        assert isinstance(value, dict)
        return value


_ANY_OBJECT = _ServerChecked(create_model("MCPArguments"), {})


class MCPServer:
    """One configured server: started on :meth:`start` (or on a call), reused until :meth:`stop`.

    A server whose connection ended (it crashed, or was killed) gives the call that noticed an error and is started
    again on the next call. Use it from one event loop (the kernel's)::

        server = MCPServer("time", entry)
        await server.start()
        result = await agentkernel.run(prompt, model=model, tools=server.tools())
        await server.stop()
    """

    def __init__(self, name: str, entry: ServerEntry, *, log_dir: str | os.PathLike[str] | None = None):
        self.name = name
        self.entry = entry
        folder = Path(log_dir) if log_dir is not None else Path(tempfile.gettempdir()) / "agentkernel-mcp"
        self.log_path = folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{os.getpid()}.log"
        self.listing: list[Any] = []
        """The tools the server listed when it last started (the SDK's ``Tool`` objects)."""
        self.ended: str | None = None
        """Why the last connection ended, when it ended without :meth:`stop`."""
        self._client: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None
        self._lock = asyncio.Lock()  # (bound to the loop that first waits on it)
        self._log_start = 0

    @property
    def running(self) -> bool:
        return self._client is not None and self.ended is None and self._owner is not None and not self._owner.done()

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the server unless it runs; AgentConfigError naming it and its stderr's tail when it cannot start
        or does not answer its handshake within ``startupTimeout`` (no process is left behind)."""
        if self.running:
            return
        async with self._lock:
            if self.running:
                return
            await self._shutdown()  # what is left of a connection that ended
            await self._start()

    async def stop(self) -> None:
        """Stop the server (closing a stdio server's stdin, then terminating it); a no-op when it is not running."""
        async with self._lock:
            await self._shutdown()
            self.ended = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def _start(self) -> None:
        with needs("mcp"):
            import mcp  # noqa: F401 - only to say how to install it
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[tuple[Any, list[Any]]] = loop.create_future()
        self._stopping = asyncio.Event()
        self.ended = None
        self._owner = loop.create_task(self._own(ready, self._stopping), name=f"agentkernel MCP server {self.name}")
        try:
            self._client, self.listing = await asyncio.wait_for(ready, self.entry.startup_timeout)
            return
        except TimeoutError:
            problem = f"did not answer its handshake within {self.entry.startup_timeout:g} s (startupTimeout)"
        except asyncio.CancelledError:
            await self._shutdown()
            raise
        except Exception as e:
            problem = f"could not start: {describe_error(e)}"
        await self._shutdown()
        # Raised outside the handler: an error whose context is the SDK's exception group is shown by IPython as a
        # full traceback, whatever its own rendering.
        raise AgentConfigError(self.redact(f"MCP server {self.name!r} ({self.entry.describe()}) {problem}")
                               + self.stderr_tail())

    async def _own(self, ready: asyncio.Future[tuple[Any, list[Any]]], stopping: asyncio.Event) -> None:
        """The owner task: enter the client, list the tools, wait to be stopped, exit the client — all here."""
        from mcp import Client
        from mcp_types import Implementation

        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8", errors="replace") as log:
                log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.entry.describe()}\n")
                log.flush()
                self._log_start = log.tell()
                async with contextlib.AsyncExitStack() as stack:
                    transport = await self._transport(stack, log)
                    client = await stack.enter_async_context(
                        Client(transport, client_info=Implementation(name="agentkernel", version=__version__)))
                    listing = await _all_tools(client)
                    if ready.done():  # the start-up timed out meanwhile
                        return
                    ready.set_result((client, listing))
                    await stopping.wait()
        except asyncio.CancelledError:
            ready.cancel()
            raise
        except BaseException as e:  # noqa: BLE001 - reported to the starter, or kept as why the server ended
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(describe_error(e)))
            else:
                self.ended = describe_error(e)

    async def _transport(self, stack: contextlib.AsyncExitStack, log: TextIO) -> Any:
        entry = self.entry
        if entry.command is not None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            # The SDK's minimal environment (PATH, HOME, ...) plus the entry's: never the kernel's keys.
            # Through its tether, so that it (and what it starts) ends with the kernel, even a killed one.
            command, *args = tethered([find_command(entry.command, entry.env.get("PATH")), *entry.args])
            parameters = StdioServerParameters(command=command, args=args, env=dict(entry.env), cwd=entry.cwd)
            return stdio_client(parameters, errlog=log)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert entry.url is not None
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=entry.headers, timeout=httpx2.Timeout(30.0, read=300.0)))
        return streamable_http_client(entry.url, http_client=http)

    async def _shutdown(self) -> None:
        owner, started, self._owner, self._client = self._owner, self._client is not None, None, None
        if owner is None:
            return
        if started and self._stopping is not None:  # the owner waits to be told: it exits the client itself
            self._stopping.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(owner), STOP_TIMEOUT)
        if not owner.done():  # still in its handshake, or stuck: the SDK's exit still stops the process
            owner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await owner

    # -- calls -----------------------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> Outcome:
        """Call ``tool`` (its name on the server), starting the server if needed; MCPToolError when the server
        answers with a protocol error or its connection ends."""
        return outcome(await self._request("answered with an error", "call_tool", tool, arguments), self.name)

    async def _request(self, failed: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``client.<method>(...)``, starting the server if needed; MCPToolError when the server answers with a
        protocol error (``failed`` says what it could not do), something that is not MCP, or its connection
        ends."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED
        from pydantic import ValidationError

        await self.start()
        try:
            return await getattr(self._client, method)(*args, **kwargs)
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                self.ended = str(e) or "the connection closed"
                raise MCPToolError(self._gone()) from None
            raise MCPToolError(f"MCP server {self.name!r} {failed}: {e}") from None
        except ValidationError as e:
            raise MCPToolError(f"MCP server {self.name!r} sent a result that is not MCP: {e}") from None
        except OSError as e:  # an HTTP server that went away
            self.ended = describe_error(e)
            raise MCPToolError(self._gone()) from None

    async def prompts(self) -> list[Any]:
        """The prompts the server offers (the SDK's ``Prompt`` objects; none if it offers no prompts)."""
        return await self._listed("prompts", "could not list its prompts", "list_prompts")

    async def resources(self) -> list[Any]:
        """The resources the server lists (the SDK's ``Resource`` objects; none if it offers no resources)."""
        return await self._listed("resources", "could not list its resources", "list_resources")

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> Any:
        """The server's prompt ``name`` filled in with ``arguments`` (a ``GetPromptResult``)."""
        return await self._request(f"could not give its prompt {name!r}", "get_prompt", name, arguments)

    async def read_resource(self, uri: str) -> Any:
        """The contents of resource ``uri`` (a ``ReadResourceResult``)."""
        return await self._request(f"could not read {uri!r}", "read_resource", uri)

    async def _listed(self, capability: str, what: str, method: str) -> list[Any]:
        await self.start()
        capabilities = getattr(self._client, "server_capabilities", None)
        if capabilities is not None and getattr(capabilities, capability, None) is None:
            return []  # the server's handshake did not offer them
        found: list[Any] = []
        cursor = None
        for _ in range(100):  # a paginator that never ends cannot hang the run
            page = await self._request(what, method, cursor=cursor)
            found += getattr(page, capability)
            cursor = page.next_cursor
            if not cursor:
                break
        return found

    def _gone(self) -> str:
        return (f"MCP server {self.name!r} is gone ({self.ended}); it is started again on the next call"
                f"{self.stderr_tail()}")

    def stderr_tail(self, lines: int = STDERR_LINES) -> str:
        """The last lines the server wrote to stderr since it last started, as a clause for a message, with the
        kernel's secrets and the entry's keys redacted."""
        if self.entry.command is None:  # an HTTP server's stderr is not ours to read
            return ""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as log:
                log.seek(self._log_start)
                tail = log.read().strip().splitlines()[-lines:]
        except OSError:
            return ""
        if not tail:
            return f" (no stderr; log {self.log_path})"
        return f"\nits stderr ({self.log_path}) ends with:\n" + self.redact("\n".join(tail))

    def redact(self, text: str) -> str:
        """``text`` with the kernel's secrets and the keys of this entry redacted (the kernel may not know them yet:
        ``%agent_mcp restart`` starts a server before any run)."""
        secrets = current()
        for name, value in self.entry.secrets(self.name).items():
            secrets = secrets.with_values([value], name)
        return secrets.redact(text)

    # -- tools -----------------------------------------------------------------------------------------------

    def tools(self, *, taken: set[str] | None = None, model_images: bool = False) -> list[Tool]:
        """The server's tools (as it listed them when it started) as :class:`Tool` objects named
        ``{server}__{tool}`` (see :func:`tool_name`; names in ``taken`` are avoided and the new ones added).

        A tool runs without asking only if the entry has ``"trustAnnotations": true`` and the tool is annotated
        ``readOnlyHint: true``; every other call asks for approval. A call's images are its result's displays (the
        panel shows them in the call's section). With ``model_images`` they are also sent to the model (at
        most :data:`~agentkernel.record.images.MAX_IMAGES_PER_CALL` a call, each within the byte budget), as
        ``run_python`` sends its figures; otherwise the model reads only their notes.
        """
        taken = set() if taken is None else taken
        return [self._tool(listed, tool_name(self.name, listed.name, taken), model_images) for listed in self.listing]

    def _tool(self, listed: Any, name: str, model_images: bool) -> Tool:
        hints = listed.annotations
        read_only = self.entry.trust_annotations and hints is not None and hints.read_only_hint is True
        schema = dict(listed.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})

        async def call(**arguments: Any) -> str | ToolOutput:
            return await tool_output(await self.call(listed.name, arguments), model_images)

        call.__name__ = call.__qualname__ = name
        description = listed.description or listed.title or f"the tool {listed.name} of MCP server {self.name}"
        return Tool(name=name, description=description, parameters=schema, fn=call, read_only=read_only,
                    timeout=self.entry.timeout, arguments_model=_ANY_OBJECT, anytime=True)

    def __repr__(self) -> str:
        state = "running" if self.running else "not running"
        return f"<MCPServer {self.name} ({self.entry.transport}: {self.entry.describe()}) {state}>"


async def tool_output(result: Outcome, model_images: bool) -> str | ToolOutput:
    """What a tool returns for ``result``: its text, its images as displays (and, with ``model_images``, sent to the
    model within the per-call budget, their notes saying so); MCPToolError for a result marked an error."""
    displays = [Display({image.mime: image.data, "text/plain": image.note}) for image in result.images]
    if result.is_error:
        raise MCPToolError(result.text, displays)
    if not (model_images and result.images):
        return ToolOutput(result.text, displays=displays) if displays else result.text
    # A large image is downscaled, which takes a while: not on the event loop.
    sent, notes = await asyncio.to_thread(images_for_model, [(i.mime, i.data) for i in result.images])
    text = result.text
    for image, note in zip(result.images, notes, strict=True):
        text = text.replace(image.note, f"{image.note[:-1]}, {note}]", 1)
    return ToolOutput(text, sent, displays)


@contextlib.asynccontextmanager
async def connect(config: MCPConfig | dict[str, Any] | str | os.PathLike[str], name: str, *,
                  log_dir: str | os.PathLike[str] | None = None) -> AsyncIterator[MCPServer]:
    """Start server ``name`` of ``config`` (an :class:`MCPConfig`, its JSON as a dict, or a file path) for the
    block, and stop it after::

        async with agentkernel.mcp.connect(".mcp.json", "git") as server:
            result = await agentkernel.run(prompt, model=model, tools=[*server.tools()])
    """
    if isinstance(config, dict):
        config = parse_config(config)
    elif not isinstance(config, MCPConfig):
        config = load_config(config)
    server = MCPServer(name, config.entry(name), log_dir=log_dir)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def _all_tools(client: Any) -> list[Any]:
    tools: list[Any] = []
    cursor = None
    for _ in range(100):  # a paginator that never ends cannot hang the start
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            break
    return tools




def find_command(command: str, path: str | None = None) -> str:
    """A stdio server's ``command`` as a path: looked up on ``PATH``, then in the kernel's own environment (the
    scripts folder of ``sys.prefix``, where ``pip install`` put it; a kernel started by its full path or by a
    kernelspec pointing into a virtual environment often lacks it on ``PATH``). A path is kept as given.

    ``path``: the ``PATH`` the entry's ``env`` gives it, else the kernel's. FileNotFoundError naming both places
    when it is in neither.
    """
    if os.path.dirname(command):
        return command
    scripts = sysconfig.get_path("scripts")
    found = shutil.which(command, path=path) or shutil.which(command, path=scripts)
    if found is None:
        raise FileNotFoundError(f"the command {command!r} is neither on PATH nor in this kernel's environment "
                                f"({scripts}): install it there, or give its absolute path as \"command\"")
    return found
