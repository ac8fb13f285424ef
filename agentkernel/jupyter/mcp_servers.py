"""MCP servers in a kernel: started by the first cell that uses them, reused by later cells, stopped at exit.

``%%agent --mcp git,time`` gives the model those servers' tools beside ``--tools``; ``--tools`` also takes a
server's name (all its tools) and a tool's ``server__tool`` name. ``%agent_mcp`` lists the configured servers
and restarts or stops one. The servers run on the kernel's event loop, so a cell that uses them must be awaited
(autoawait on, the default in a notebook).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import AgentConfigError
from ..tools import Tool
from .options import AgentOptions

if TYPE_CHECKING:  # agentkernel.mcp (and pydantic) are imported when a cell first needs a server
    from ..mcp import MCPConfig, MCPServer

MCP_USAGE = "%agent_mcp                 list the configured MCP servers, whether each runs, and its tools\n" \
            "%agent_mcp restart NAME    stop server NAME if it runs, and start it\n" \
            "%agent_mcp stop NAME       stop server NAME"


@dataclass
class Wanted:
    """The servers a cell needs, from the configuration it reads."""

    config: MCPConfig | None = None
    names: list[str] = field(default_factory=list)


class KernelServers:
    """The kernel's MCP servers by name; an entry changed in the configuration gets a new server."""

    def __init__(self) -> None:
        self.servers: dict[str, MCPServer] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    def wanted(self, options: AgentOptions, known: set[str]) -> Wanted:
        """The servers named by ``--mcp`` and by ``--tools`` names that are not ``known`` tools.

        The configuration is read only when a cell names a server: a ``.mcp.json`` left for another program starts
        nothing. A ``--tools`` name that is no server's is left for the magic's unknown-tool message.
        """
        extra = [name for name in options.tools if name not in known]
        if not options.mcp and not extra:
            return Wanted()
        from ..mcp import tool_name

        try:
            config = read_config(options.mcp_config)
        except AgentConfigError:
            if options.mcp or options.mcp_config:
                raise
            return Wanted()  # no configuration: the names are unknown tools
        for name in options.mcp:
            config.entry(name)  # AgentConfigError naming the file and its servers
        names = list(dict.fromkeys(options.mcp))
        for name in extra:
            server = name if name in config.servers else next(
                (s for s in config.servers if name.startswith(tool_name(s, "", set()))), None)
            if server is not None and server not in names:
                names.append(server)
        return Wanted(config, names)

    async def start(self, wanted: Wanted) -> dict[str, MCPServer]:
        """The wanted servers, started (each on first use; one whose entry changed is stopped and made anew)."""
        if wanted.config is None:
            return {}
        self.on_loop()
        started: dict[str, MCPServer] = {}
        for name in wanted.names:
            server = await self.server(wanted.config, name)
            await server.start()
            started[name] = server
        return started

    def on_loop(self) -> None:
        """Remember the kernel's event loop, for stopping the servers at exit."""
        if self.loop is None:
            atexit.register(self.stop_at_exit)
        self.loop = asyncio.get_running_loop()

    async def server(self, config: MCPConfig, name: str) -> MCPServer:
        entry = config.entry(name)
        server = self.servers.get(name)
        if server is None or server.entry != entry:
            if server is not None:
                await server.stop()
            from ..mcp import MCPServer

            server = self.servers[name] = MCPServer(name, entry)
        return server

    async def stop_all(self) -> None:
        await asyncio.gather(*(server.stop() for server in self.servers.values()), return_exceptions=True)

    def stop_at_exit(self) -> None:
        """Stop the servers when the kernel exits (its event loop has stopped by then, but is not closed)."""
        loop = self.loop
        if loop is None or loop.is_closed() or loop.is_running() or not any(s.running for s in self.servers.values()):
            return
        with contextlib.suppress(Exception):  # a stdio server also ends when its stdin closes with the kernel
            loop.run_until_complete(asyncio.wait_for(self.stop_all(), 15))

    # -- %agent_mcp ------------------------------------------------------------------------------------------

    def listing(self, config: MCPConfig | None) -> str:
        """What ``%agent_mcp`` prints: each configured server, whether it runs, and its tools."""
        names = [*(config.servers if config else {}), *(n for n in self.servers if not config or
                                                        n not in config.servers)]
        if not names:
            from ..mcp import CONFIG_FILE

            return f"no MCP servers are configured in {config.source if config else CONFIG_FILE}"
        lines = [f"MCP servers in {config.source}:" if config else "MCP servers:"]
        for name in names:
            server = self.servers.get(name)
            entry = config.servers.get(name) if config else None
            entry = entry or (server.entry if server else None)
            assert entry is not None
            if server is not None and server.running:
                state = "running"
            elif server is not None and server.ended:
                state = f"ended ({server.ended}); starts again on next use"
            else:
                state = "not running"
            trust = ", trusts annotations" if entry.trust_annotations else ""
            lines.append(f"{name}: {entry.transport} {entry.describe()} · {state}{trust}")
            if config and name not in config.servers:
                lines[-1] += " · not in the configuration any more"
            if server is not None and server.running:
                for tool in server.tools():
                    lines.append(f"    {tool.name}{'' if tool.read_only else '  (asks for approval)'}")
        return "\n".join(lines)

    def listing_for(self, config_path: str) -> str:
        """The listing of the servers configured at ``config_path`` (or where the magic looks) and of those running."""
        try:
            config = read_config(config_path)
        except AgentConfigError as e:
            if self.servers:
                return f"{e}\n{self.listing(None)}"
            raise
        return self.listing(config)

    async def command(self, words: list[str], config_path: str) -> str:
        """Run ``%agent_mcp`` with ``words``; the text to print."""
        if not words:
            return self.listing_for(config_path)
        if len(words) != 2 or words[0] not in ("restart", "stop"):
            raise AgentConfigError(f"%agent_mcp {' '.join(words)}: not understood; usage:\n{MCP_USAGE}")
        action, name = words
        if action == "stop":
            server = self.servers.get(name)
            if server is None or not server.running:
                return f"MCP server {name!r} is not running"
            await server.stop()
            return f"MCP server {name!r} stopped"
        self.on_loop()
        server = await self.server(read_config(config_path), name)
        await server.restart()
        return f"MCP server {name!r} restarted with {len(server.listing)} tools"


def read_config(path: str) -> MCPConfig:
    """The MCP configuration at ``path``, or where the magic looks when it is empty (see :func:`load_config`)."""
    from ..mcp import load_config

    return load_config(path or None)


def mcp_tools(servers: dict[str, MCPServer], taken: set[str], model_images: bool = False) -> dict[str, list[Tool]]:
    """Each started server's tools for one run, named apart from ``taken`` (the other tools' names); with
    ``model_images`` their images go to the model too."""
    return {name: server.tools(taken=taken, model_images=model_images)
            for name, server in servers.items()}
