"""What a tool call costs when the tool lives in an MCP server: one stdio round trip beside a ``@tool`` call.

Not a test: run ``PYTHONPATH=. python benchmarks/mcp_call.py`` (needs the ``mcp`` extra and ``mcp-server-time``,
which scripts/test.sh installs). It prints, per call, the median of the loop's whole round (scripted model, call,
output, guards) for

- an async ``@tool`` that does the same work in process (``zoneinfo`` conversion),
- ``time__convert_time`` of ``mcp-server-time`` over stdio (JSON-RPC to a child process and back),
- ``MCPServer.call`` alone for the same call (the SDK's round trip and the result's mapping, no loop),

and the time the server takes to start (spawn, handshake, tool listing), which the first cell that uses it pays.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from datetime import datetime
from zoneinfo import ZoneInfo

from agentkernel import Call, ScriptedModel, run, tool
from agentkernel.mcp import MCPServer, parse_config

ARGS = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200


@tool
async def convert_time(source_timezone: str, time: str, target_timezone: str) -> str:
    """Convert a time between time zones."""
    hour, minute = map(int, time.split(":"))
    source = datetime.now(ZoneInfo(source_timezone)).replace(hour=hour, minute=minute, second=0, microsecond=0)
    return source.astimezone(ZoneInfo(target_timezone)).isoformat()


def arguments(i: int) -> dict[str, str]:
    """A different time for each call (the same call three times would trip the repeated-call guard)."""
    return {**ARGS, "time": f"{i // 60 % 24:02d}:{i % 60:02d}"}


async def per_round(name: str, tools: list, rounds: int) -> float:
    """Seconds per round of a run making ``rounds`` calls of ``name`` (the median of three runs)."""
    times = []
    for _ in range(3):
        model = ScriptedModel([Call(name, arguments(i)) for i in range(rounds)] + ["done"])
        start = time.perf_counter()
        result = await run("go", model=model, tools=tools, approve=lambda c, t: True)
        times.append((time.perf_counter() - start) / rounds)
        assert result.status == "complete", (result.status, result.detail)
    return statistics.median(times)


async def main() -> None:
    config = parse_config({"mcpServers": {"time": {"command": "mcp-server-time", "trustAnnotations": True}}})
    server = MCPServer("time", config.servers["time"])
    starts = []
    for _ in range(3):
        start = time.perf_counter()
        await server.start()
        starts.append(time.perf_counter() - start)
        await server.stop()
    await server.start()
    try:
        local = await per_round("convert_time", [convert_time], ROUNDS)
        remote = await per_round("time__convert_time", server.tools(), ROUNDS)
        sdk = []
        for i in range(ROUNDS):
            start = time.perf_counter()
            await server.call("convert_time", arguments(i))
            sdk.append(time.perf_counter() - start)
    finally:
        await server.stop()
    print(f"{ROUNDS} calls per run, median of 3 runs")
    print(f"{'@tool (async, in process), ms per round':<52}{local * 1e3:>8.3f}")
    print(f"{'MCP stdio (mcp-server-time), ms per round':<52}{remote * 1e3:>8.3f}   {remote / local:.0f}x the @tool")
    print(f"{'  MCPServer.call alone (no loop), ms (median)':<52}{statistics.median(sdk) * 1e3:>8.3f}")
    print(f"{'server start (spawn, handshake, tools/list), s':<52}{statistics.median(starts):>8.2f}")


if __name__ == "__main__":
    asyncio.run(main())
