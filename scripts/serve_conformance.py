"""Run the MCP conformance suite's server scenarios against the server ``%agent_serve`` uses, in this process.

Usage: ``PYTHONPATH=. python scripts/serve_conformance.py`` after ``npm ci --prefix tests/serve`` (the suite,
``@modelcontextprotocol/conformance``, and the Node 22 it needs, pinned in ``tests/serve/package.json``).

The served tools are a session's (:class:`agentkernel.mcp.session.ServedSession` behind
:class:`agentkernel.mcp.serving.MCPHTTPServer`, as ``%agent_serve`` makes them), not the suite's own test tools, so
only the scenarios about the protocol itself apply (``SCENARIOS`` in ``tests/support/serve_clients.py``, with the
expected failures and why the others do not apply). It prints each scenario's outcome and exits non-zero if one
not expected to fail fails. ``tests/kernel/test_serve_conformance.py`` runs the same against ``%agent_serve`` in a
real kernel, in CI.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "support"))

from serve_clients import CONFORMANCE, EXPECTED_FAILURES, NODE, conform  # noqa: E402

from agentkernel import tool  # noqa: E402
from agentkernel.mcp.serving import MCPHTTPServer  # noqa: E402
from agentkernel.mcp.session import ServedSession  # noqa: E402


@tool
def describe(name: str) -> str:
    """Describe a variable."""
    return f"{name}: nothing here"


async def main() -> int:
    server = MCPHTTPServer(ServedSession([describe]))
    await server.start()
    try:
        outcomes = await conform(server.port, server.headers["Authorization"])
    finally:
        await server.stop()
    for outcome in outcomes:
        print(outcome.line())
        if not outcome.checks:
            print(outcome.output)
    return int(any(not o.passed and o.scenario not in EXPECTED_FAILURES for o in outcomes))


if __name__ == "__main__":
    if not (NODE.is_file() and CONFORMANCE.is_file()):
        print(__doc__)
        sys.exit(2)
    sys.exit(asyncio.run(main()))
