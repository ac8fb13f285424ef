"""MCP servers' resources as one read-only tool, ``read_resource(uri)``, whose description lists them."""

from __future__ import annotations

from typing import Any

from ..tools import Tool, ToolOutput, tool
from .results import resource_outcome
from .server import MCPServer, MCPToolError, tool_output

MAX_LISTED = 50
"""Resources named in the tool's description (all of them are readable)."""


def resource_tool(servers: dict[str, MCPServer], listed: dict[str, list[Any]], *, model_images: bool = False) -> Tool:
    """``read_resource(uri, server)`` over ``servers``, whose ``listed`` resources (the SDK's ``Resource`` objects,
    by server name) its description names. A URI a server listed goes to that server; any other to ``server``, or
    to the one server if there is one. Images are displays, and sent to the model with ``model_images`` (as MCP
    tools' images are)."""
    owner = {resource.uri: name for name, resources in listed.items() for resource in resources}
    lines = [f"- {r.uri} ({name}): {r.name}{f', {r.mime_type}' if r.mime_type else ''}"
             f"{f' - {r.description}' if r.description else ''}"
             for name, resources in listed.items() for r in resources]
    more = f"\n(and {len(lines) - MAX_LISTED} more)" if len(lines) > MAX_LISTED else ""

    async def read_resource(uri: str, server: str = "") -> str | ToolOutput:
        name = owner.get(uri) or server or (next(iter(servers)) if len(servers) == 1 else "")
        if name not in servers:
            raise MCPToolError(f"no server lists {uri!r}; pass server= one of {', '.join(servers)}" if not server
                               else f"there is no MCP server {server!r} in this run; the servers: {', '.join(servers)}")
        return await tool_output(resource_outcome(await servers[name].read_resource(uri), name), model_images)

    read_resource.__doc__ = (
        "Read a resource of the MCP servers by its URI (text whole, images as images).\n\n"
        + ("The servers list:\n" + "\n".join(lines[:MAX_LISTED]) + more if lines else "No server lists a resource.")
        + "\n\nArgs:\n    uri: The resource's URI, e.g. one listed above.\n"
          "    server: The server to ask, for a URI none lists (default: the one that lists it).")
    return tool(read_resource, anytime=True)
