"""What ``%agent_serve`` costs: a read-only call's round trip through the served session against the same tool in a
bare MCP server over the same transport, and the kernel's idle CPU while a session is open.

Not a test: run ``PYTHONPATH=. python benchmarks/serve.py [CALLS]`` (needs the ``mcp`` extra). A kernel is started
with ``jupyter_client`` (as the kernel tests do) and holds variables ``v0`` ... ``vN``. In that kernel, on its event
loop, run

- ``%agent_serve --tools inspect_variable`` (bearer token, Host/Origin checks, the session's lock, the runner's
  approval check, worker thread, redaction and cut, the guards, the panel's section, the record), and
- a bare server made with the same SDK (``mcp.server.lowlevel.Server`` over Streamable HTTP, served by uvicorn on
  the same loop) whose one tool calls the same ``inspect_variable`` directly.

The official ``mcp`` client in this process calls ``inspect_variable(vI)`` on each (a different variable each time:
the same call again would be told it repeats), in alternating blocks so that noise hits both; it prints the median
round trip of each and their ratio (goal: at most 2x), and the kernel process's CPU over 10 s idle with and without a
session open.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from kernel_client import KernelSession, agent_kernel  # noqa: E402

CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
BLOCK = 20
IDLE_SECONDS = 10.0

SETUP = f"""\
%autoawait True
%config AgentMagics.transcripts = False
import asyncio, os, socket
for _i in range({CALLS}):
    globals()[f"v{{_i}}"] = list(range(_i % 50))

async def start_bare():
    "The same tool, served by the SDK alone on this kernel's loop (no token, no session, no runner)."
    import mcp_types as types, uvicorn
    from mcp.server.lowlevel import Server
    from agentkernel.jupyter.kernel.tools import KernelTools
    tools = KernelTools(get_ipython())
    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(name="inspect_variable", input_schema={{"type": "object"}})])
    async def call_tool(ctx, params):
        text = await asyncio.to_thread(tools.inspect_variable, **params.arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
    server = Server("bare", on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(streamable_http_path="/mcp")
    sock = socket.socket(); sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    async def own():
        async with server.session_manager.run():
            await uv._serve(sockets=[sock])
    global _bare
    _bare = asyncio.ensure_future(own())
    while not uv.started:
        await asyncio.sleep(0.01)
    return f"http://127.0.0.1:{{sock.getsockname()[1]}}/mcp"
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(kernel: KernelSession, pid: int) -> float:
    """CPU milliseconds per second the kernel spends over ``IDLE_SECONDS`` with nothing to do."""
    kernel.settle(1.0)
    before = cpu_seconds(pid)
    time.sleep(IDLE_SECONDS)
    return (cpu_seconds(pid) - before) / IDLE_SECONDS * 1e3


async def round_trips(served: tuple[str, dict[str, str]], bare: str) -> tuple[list[float], list[float]]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    url, headers = served
    times: dict[str, list[float]] = {"served": [], "bare": []}
    async with httpx2.AsyncClient(headers=headers) as http_s, httpx2.AsyncClient() as http_b, \
            Client(streamable_http_client(url, http_client=http_s)) as s, \
            Client(streamable_http_client(bare, http_client=http_b)) as b:
        for c in (s, b):  # warm both up
            await c.call_tool("inspect_variable", {"name": "v0"})
        for start in range(0, CALLS, BLOCK):
            for name, c in (("served", s), ("bare", b)) if start % (2 * BLOCK) == 0 else (("bare", b), ("served", s)):
                for i in range(start, min(start + BLOCK, CALLS)):
                    began = time.perf_counter()
                    result = await c.call_tool("inspect_variable", {"name": f"v{i}"})
                    times[name].append(time.perf_counter() - began)
                    assert not result.is_error, result
    return times["served"], times["bare"]


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as root, agent_kernel(Path(root)) as kernel:
        kernel.ok(SETUP, timeout=120)
        pid = kernel.value("os.getpid()")
        quiet = idle_cpu(kernel, pid)
        kernel.ok("%agent_serve --tools inspect_variable")
        served = (kernel.value("_agent_serve.url"), kernel.value("_agent_serve.headers"))
        open_idle = idle_cpu(kernel, pid)
        bare_url = kernel.ok("await start_bare()").displays[-1]["text/plain"].strip("'")
        s, b = asyncio.run(round_trips(served, bare_url))
        calls = kernel.value("len(_agent_serve.calls)")
        kernel.ok("%agent_serve stop")
    ms, bare_ms = statistics.median(s) * 1e3, statistics.median(b) * 1e3
    print(f"{CALLS} read-only calls each (inspect_variable), medians; {calls} calls recorded by the session")
    print(f"{'through %agent_serve, ms per call':<48}{ms:>8.2f}")
    print(f"{'bare SDK server, same tool and transport, ms':<48}{bare_ms:>8.2f}")
    print(f"{'ratio (goal <= 2x)':<48}{ms / bare_ms:>8.2f}x")
    print(f"{'kernel idle CPU, no session, ms per s':<48}{quiet:>8.2f}")
    print(f"{'kernel idle CPU, session open, ms per s':<48}{open_idle:>8.2f}")


if __name__ == "__main__":
    main()
