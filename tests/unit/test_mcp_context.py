"""MCP servers' prompts and resources, through the official SDK against real servers: server-everything (npm) and a
server made with the SDK's own server side (tests/mcp/picture_server.py) for an image resource."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_servers import EVERYTHING, need

from agentkernel.mcp import MCPServer, parse_config
from agentkernel.mcp.resources import resource_tool
from agentkernel.mcp.results import prompt_text
from agentkernel.tools import ToolCall, ToolRunner

PICTURES = Path(__file__).parents[1] / "mcp" / "picture_server.py"
CONFIG = {"mcpServers": {
    "everything": {"command": "node", "args": [str(EVERYTHING)]},
    "pictures": {"command": sys.executable, "args": [str(PICTURES)]},
    "time": {"command": "mcp-server-time"},
}}


def with_servers(names: list[str], work: Any) -> Any:
    async def main() -> Any:
        config = parse_config(CONFIG)
        servers = {name: MCPServer(name, config.entry(name)) for name in names}
        try:
            return await work(servers)
        finally:
            for server in servers.values():
                await server.stop()

    return asyncio.run(main())


def test_prompts_listed_and_filled_in() -> None:
    need("mcp-server-time", everything=True)

    async def work(servers: dict[str, MCPServer]) -> Any:
        listed = {name: [p.name for p in await s.prompts()] for name, s in servers.items()}
        simple = prompt_text(await servers["everything"].get_prompt("simple-prompt", {}))
        embedded = prompt_text(await servers["everything"].get_prompt(
            "resource-prompt", {"resourceType": "Text", "resourceId": "2"}))
        turns = prompt_text(await servers["pictures"].get_prompt("review", {"chart": "c.png"}))
        return listed, simple, embedded, turns

    listed, simple, embedded, turns = with_servers(["everything", "pictures", "time"], work)
    assert {"simple-prompt", "args-prompt"} <= set(listed["everything"]) and listed["time"] == []
    assert simple == "This is a simple prompt without arguments."
    assert "Resource 2: This is a plaintext resource" in embedded  # the embedded resource's text, whole
    assert turns == "(user) Review the chart c.png.\n\n(assistant) Which aspects?\n\n(user) Colours and labels."


def test_read_resource_text_image_and_unknown() -> None:
    need(everything=True)

    async def work(servers: dict[str, MCPServer]) -> Any:
        listed = {name: await server.resources() for name, server in servers.items()}
        read = resource_tool(servers, listed, model_images=True)
        calls = [ToolCall("1", "read_resource", '{"uri": "demo://resource/static/document/features.md"}'),
                 ToolCall("2", "read_resource", '{"uri": "pictures://grey.png"}'),
                 ToolCall("3", "read_resource", '{"uri": "demo://resource/dynamic/text/3", "server": "everything"}'),
                 ToolCall("4", "read_resource", '{"uri": "demo://nope", "server": "everything"}'),
                 ToolCall("5", "read_resource", '{"uri": "demo://nope"}')]
        return read, await ToolRunner({"read_resource": read}).run(calls)

    read, (text, image, template, unknown, unowned) = with_servers(["everything", "pictures"], work)
    assert read.read_only and "pictures://grey.png (pictures): grey square, image/png" in read.description
    assert text.status == "ok" and "# Everything Server - Features" in text.output
    assert image.status == "ok" and "[image/png 12x12 from server pictures, sent to the model" in image.output
    assert len(image.images) == 1 and [list(d.data) for d in image.displays] == [["image/png", "text/plain"]]
    assert template.status == "ok" and "Resource 3" in template.output
    assert unknown.status == "error" and "could not read 'demo://nope'" in unknown.output
    assert unowned.status == "error" and "no server lists 'demo://nope'; pass server= one of" in unowned.output


@pytest.fixture(autouse=True)
def _mcp() -> None:
    pytest.importorskip("mcp")
