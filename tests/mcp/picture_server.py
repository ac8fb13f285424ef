"""A stdio MCP server made with the official SDK's server side, for what server-everything does not offer: an image
resource and a prompt whose messages are not all the user's. Started by the tests as ``python picture_server.py``."""

import struct
import zlib

from mcp.server.mcpserver import MCPServer

server = MCPServer("pictures")


def png(width: int, height: int) -> bytes:
    """A grey PNG of that size."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@server.resource("pictures://grey.png", name="grey square", mime_type="image/png", description="a grey square")
def grey() -> bytes:
    return png(12, 12)


@server.resource("pictures://notes.txt", name="notes", mime_type="text/plain")
def notes() -> str:
    return "The grey square is 12 pixels wide."


@server.prompt(name="review", description="Review a chart")
def review(chart: str) -> list[dict[str, object]]:
    return [{"role": "user", "content": f"Review the chart {chart}."},
            {"role": "assistant", "content": "Which aspects?"},
            {"role": "user", "content": "Colours and labels."}]


if __name__ == "__main__":
    server.run("stdio")
