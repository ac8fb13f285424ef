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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import AgentConfigError
from ..tools import Tool
from ..tools.toolsets import Toolset

if TYPE_CHECKING:  # agentkernel.mcp (and pydantic) are imported when a cell first needs a server
    from ..mcp import MCPConfig, MCPServer

MCP_USAGE = "%agent_mcp [list]          list the configured MCP servers, whether each runs, and its tools\n" \
            "%agent_mcp restart NAME    stop server NAME if it runs, and start it\n" \
            "%agent_mcp stop NAME       stop server NAME\n" \
            "%agent_mcp prompts [NAME]  list the servers' prompts (for %%agent --prompt SERVER/PROMPT)\n" \
            "(each takes --mcp-config PATH first to read that configuration)"


class KernelServers:
    """The kernel's MCP servers by name; an entry changed in the configuration gets a new server."""

    def __init__(self) -> None:
        self.servers: dict[str, MCPServer] = {}
        self.loop: asyncio.AbstractEventLoop | None = None

    async def start(self, config: MCPConfig, names: list[str]) -> dict[str, MCPServer]:
        """The servers ``names`` of ``config``, started (each on first use; one whose entry changed is stopped and
        made anew)."""
        self.on_loop()
        started: dict[str, MCPServer] = {}
        for name in names:
            server = await self.server(config, name)
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

    async def prompts(self, config: MCPConfig, names: list[str]) -> str:
        """``%agent_mcp prompts [NAME]``: the prompts of the configured servers (or of NAME), each started for it."""
        from ..mcp import MCPToolError

        self.on_loop()
        lines = []
        for name in names or list(config.servers):
            server = await self.server(config, name)
            try:
                lines += prompt_listing(name, await server.prompts())
            except (MCPToolError, AgentConfigError) as e:
                lines.append(f"{name}: {str(e).splitlines()[0]}")
        return "\n".join(lines)

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
        if words[0] == "prompts" and len(words) <= 2:
            return await self.prompts(read_config(config_path), words[1:])
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


@dataclass(frozen=True)
class PromptSpec:
    """``--prompt SERVER/PROMPT NAME=VALUE ...``: a server's prompt and its arguments."""

    server: str
    name: str
    arguments: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> PromptSpec:
        """Read ``SERVER/PROMPT [NAME=VALUE ...]``; AgentConfigError saying what is wrong."""
        head, *words = text.split()
        server, _, name = head.partition("/")
        if not server or not name:
            raise AgentConfigError(f"--prompt needs SERVER/PROMPT (e.g. --prompt everything/simple-prompt), not "
                                   f"{head!r}; %agent_mcp prompts lists them")
        arguments = {}
        for word in words:
            key, equals, value = word.partition("=")
            if not equals or not key:
                raise AgentConfigError(f"--prompt {head}: its arguments are NAME=VALUE words, not {word!r}")
            arguments[key] = value
        return cls(server, name, arguments)


def prompt_arguments(text: str) -> tuple[list[str], str]:
    """The leading ``NAME=VALUE`` words of ``text`` (``--prompt``'s arguments) and the rest of it."""
    words = text.split()
    count = next((i for i, word in enumerate(words) if "=" not in word or word.startswith("=")), len(words))
    rest = text
    for word in words[:count]:
        rest = rest.split(word, 1)[1]
    return words[:count], rest.strip()


def prompt_listing(server: str, prompts: list[Any]) -> list[str]:
    """``%agent_mcp prompts``' lines for one server: each prompt as ``--prompt`` takes it, its arguments (``?`` for
    an optional one) and description."""
    if not prompts:
        return [f"{server}: no prompts"]
    lines = []
    for prompt in prompts:
        arguments = " ".join(f"{a.name}=…{'' if a.required else '?'}" for a in prompt.arguments or [])
        about = f"  {prompt.description}" if prompt.description else ""
        lines.append(f"{server}/{prompt.name}{' ' + arguments if arguments else ''}{about}")
    return lines


def read_config(path: str) -> MCPConfig:
    """The MCP configuration at ``path``, or where the magic looks when it is empty (see :func:`load_config`)."""
    from ..mcp import load_config

    return load_config(path or None)


class MCPToolset(Toolset):
    """The configured MCP servers as a tool source: a server's name gives all its tools, ``server__tool`` one of
    them; the ``--mcp`` servers give all their tools whatever ``--tools`` says.

    The configuration is read only when a word no other source claims (or ``--mcp``, ``--mcp-config``) asks for a
    server: a ``.mcp.json`` left for another program starts nothing. The servers a run needs start in
    :meth:`start`, on the kernel's event loop; their tools are made for the run after that.
    """

    def __init__(self, servers: KernelServers, config_path: str = "", mcp: list[str] | None = None, *,
                 model_images: bool = False, prompt: str | None = None):
        self.kernel = servers
        self.config_path = config_path
        self.model_images = model_images
        self.config: MCPConfig | None = None
        self.wanted: list[str] = []
        """The servers the run needs, in the order they were named."""
        self.served: dict[str, list[Tool]] = {}
        """The started servers' tools for this run, by server."""
        self.started: dict[str, MCPServer] = {}
        self.always = list(dict.fromkeys(mcp or []))
        self.whole = list(self.always)
        """The servers the run has all of (``--mcp``, or named alone in ``--tools``): their resources too."""
        self.resources: dict[str, list[Any]] = {}
        """The whole servers' resources (the SDK's ``Resource`` objects), listed when they start."""
        self.prompt = PromptSpec.parse(prompt) if prompt else None
        self._read = False
        if self.always or self.prompt:
            config = self._configuration()
            assert config is not None
            for name in [*self.always, *([self.prompt.server] if self.prompt else [])]:
                config.entry(name)  # AgentConfigError naming the file and its servers
            self.wanted = list(dict.fromkeys([*self.always, *([self.prompt.server] if self.prompt else [])]))

    def _configuration(self) -> MCPConfig | None:
        if not self._read:
            self._read = True
            try:
                self.config = read_config(self.config_path)
            except AgentConfigError:
                if self.always or self.prompt or self.config_path:
                    raise
                self.config = None  # no configuration: the words are unknown tools
        return self.config

    def server_of(self, word: str) -> str | None:
        """The configured server ``word`` names, itself or by the ``server__`` prefix of one of its tools."""
        config = self._configuration()
        if config is None:
            return None
        if word in config.servers:
            return word
        from ..mcp import tool_name

        return next((s for s in config.servers if word.startswith(tool_name(s, "", set()))), None)

    def names(self) -> list[str]:
        return [t.name for tools in self.served.values() for t in tools]

    def claims(self, word: str) -> bool:
        server = self.server_of(word)
        if server is not None and server not in self.wanted:
            self.wanted.append(server)
        if server is not None and server == word and server not in self.whole:
            self.whole.append(server)
        return server is not None

    async def start(self) -> None:
        """Start the servers the run needs and make their tools for it (named apart from each other)."""
        if not self.wanted or self.config is None:
            return
        self.started = await self.kernel.start(self.config, self.wanted)
        taken: set[str] = set()
        self.served = {name: server.tools(taken=taken, model_images=self.model_images)
                       for name, server in self.started.items()}
        from ..mcp import MCPToolError

        try:
            self.resources = {name: await self.started[name].resources() for name in self.whole}
        except MCPToolError as e:
            raise AgentConfigError(str(e)) from None

    def resource_tool(self) -> Tool | None:
        """``read_resource`` over the whole servers that list resources, or None when none does."""
        listed = {name: resources for name, resources in self.resources.items() if resources}
        if not listed:
            return None
        from ..mcp.resources import resource_tool

        return resource_tool({name: self.started[name] for name in listed}, listed, model_images=self.model_images)

    async def prompt_text(self) -> str:
        """The text of the ``--prompt`` server's prompt, filled in with its arguments (after :meth:`start`)."""
        assert self.prompt is not None
        from ..mcp import MCPToolError
        from ..mcp.results import prompt_text

        try:
            return prompt_text(await self.started[self.prompt.server].get_prompt(self.prompt.name,
                                                                                 self.prompt.arguments))
        except MCPToolError as e:
            raise AgentConfigError(f"--prompt {self.prompt.server}/{self.prompt.name}: {e}") from None

    def make(self, word: str) -> list[Tool]:
        if word in self.served:
            return self.served[word]
        found = [t for tools in self.served.values() for t in tools if t.name == word]
        if not found:
            raise AgentConfigError(f"unknown tool {word!r}: the MCP servers' tools are {', '.join(self.names())}")
        return found

    def offer(self) -> str:
        return "an MCP server or server__tool"

    def always_tools(self) -> list[Tool]:
        """The tools of the ``--mcp`` servers."""
        return [t for name in self.always for t in self.served.get(name, [])]

    def untrusted(self) -> dict[str, str]:
        """The tools of servers whose annotations are not trusted (each of their calls asks), by server name."""
        return {t.name: name for name, tools in self.served.items()
                if not self.started[name].entry.trust_annotations for t in tools}
