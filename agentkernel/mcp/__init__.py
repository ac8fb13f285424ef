"""MCP servers as tool sources: configuration in the ``mcpServers`` shape, one owner task per server, and each
server's tools as ordinary :class:`~agentkernel.tools.Tool` objects (the loop never knows where a tool comes from).

::

    async with agentkernel.mcp.connect(".mcp.json", "git") as server:
        result = await agentkernel.run(prompt, model=model, tools=[*server.tools()], approve=ask_me)

Reading the configuration needs nothing more; starting a server needs the ``mcp`` package
(``pip install 'jupyter-agentkernel[mcp]'``).
"""

from .config import CONFIG_ENV, CONFIG_FILE, MCPConfig, ServerEntry, load_config, parse_config
from .results import McpImage, Outcome
from .server import INSTALL_HINT, MCPServer, MCPToolError, connect, tool_name

__all__ = ["CONFIG_ENV", "CONFIG_FILE", "INSTALL_HINT", "MCPConfig", "McpImage", "MCPServer", "MCPToolError", "Outcome",
           "ServerEntry", "connect", "load_config", "parse_config", "tool_name"]
