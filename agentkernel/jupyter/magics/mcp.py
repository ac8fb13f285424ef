"""``%agent_mcp [--mcp-config PATH] [list|restart NAME|stop NAME]``: the kernel's MCP servers."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class

from ..kernel_state import Awaited
from ..options import split_line
from .shared import StateMagics


@magics_class
class MCPMagics(StateMagics):
    """``%agent_mcp``: it lists anywhere, and restarts or stops a server when awaited alone in its cell."""

    def awaited_forms(self) -> dict[str, Awaited]:
        return {"agent_mcp": self.command}

    @line_magic
    def agent_mcp(self, line: str) -> None:
        """``%agent_mcp [--mcp-config PATH] [list|restart NAME|stop NAME]``: list the configured MCP servers (of
        PATH, else ``$AGENTKERNEL_MCP_CONFIG`` or ``.mcp.json``), whether each runs, and its tools; ``restart NAME``
        and ``stop NAME`` restart or stop one.

        Alone in a cell it is awaited on the kernel's event loop; elsewhere it can only list.
        """
        from ..mcp_servers import MCP_USAGE

        words, config = self.mcp_words(line)
        if words:
            raise UsageError(f"%agent_mcp {line.strip()} must be alone in its cell (it is awaited there)\n{MCP_USAGE}")
        print(self.state.mcp_servers.listing_for(config))

    async def command(self, line: str, cell: str | None = None) -> None:
        """The awaited ``%agent_mcp``."""
        words, config = self.mcp_words(line)
        print(await self.state.mcp_servers.command(words, config))

    def mcp_words(self, line: str) -> tuple[list[str], str]:
        """``%agent_mcp``'s words without ``--mcp-config PATH`` (and a ``list``, the default), and the configuration
        to read: PATH, else the one ``%%agent`` reads."""
        from ..mcp_servers import MCP_USAGE

        words, rest = split_line(self.state.expand_text(line))
        try:
            args = self.state.parser.parse_args(words)
        except UsageError as e:
            raise UsageError(f"%agent_mcp {line.strip()}: {e}\n{MCP_USAGE}") from None
        if any(value is not None for name, value in vars(args).items() if name != "mcp_config"):
            raise UsageError(f"%agent_mcp takes only --mcp-config PATH as an option\n{MCP_USAGE}")
        action = rest.split()
        return (action[1:] if action[:1] == ["list"] else action), args.mcp_config or self.state.merge(args).mcp_config
