"""The MCP conformance suite (``@modelcontextprotocol/conformance``, pinned in ``tests/serve/package.json``) against
``%agent_serve`` in a real kernel: every server scenario that applies to a served session passes, the
expected failures (:data:`serve_clients.EXPECTED_FAILURES`) are exactly the ones that fail, and every other scenario
of the suite is listed with why it does not apply.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest
import serve_clients
from kernel_client import kernel_fixtures
from serve_clients import CONFORMANCE, EXPECTED_FAILURES, NODE, NOT_APPLICABLE, SCENARIOS, conform

pytest.importorskip("mcp")

SETUP = """\
%reset -f
%config AgentMagics.transcripts = False
import os
os.environ.pop("CI", None)
"""

session, kernel = kernel_fixtures("serve_conformance", SETUP)


@pytest.fixture
def served(kernel):
    """``%agent_serve`` started: the server's port and the ``Authorization`` header it wants."""
    serve_clients.need(NODE, CONFORMANCE)
    kernel.ok("%agent_serve")
    try:
        yield urlsplit(kernel.value("_agent_serve.url")).port, kernel.value("_agent_serve.headers['Authorization']")
    finally:
        kernel.ok("%agent_serve stop")


def test_every_server_scenario_of_the_suite_is_run_or_said_not_to_apply():
    serve_clients.need(NODE, CONFORMANCE)
    assert set(SCENARIOS).isdisjoint(NOT_APPLICABLE) and set(EXPECTED_FAILURES) <= set(SCENARIOS)
    assert serve_clients.server_scenarios() == set(SCENARIOS) | set(NOT_APPLICABLE)


def test_the_scenarios_that_apply_pass_against_agent_serve(kernel, served):
    port, authorization = served
    outcomes = asyncio.run(conform(port, authorization))
    report = "\n".join(o.line() + ("" if o.checks else "\n" + o.output) for o in outcomes)
    assert [o.scenario for o in outcomes] == list(SCENARIOS)
    assert {o.scenario for o in outcomes if not o.passed} == set(EXPECTED_FAILURES), report
    assert all(o.checks for o in outcomes), report  # each scenario ran its checks
    calls = kernel.value("[c.name for c in _agent_serve.calls]")
    assert calls, "the suite's tools/call reached the session"  # tools-call-error: a call the runner saw


def test_without_the_token_the_suite_gets_nowhere(kernel, served):
    port, _ = served
    [outcome] = asyncio.run(conform(port, "Bearer not-the-session's", ("server-initialize",)))
    assert not outcome.passed, outcome.line()
    assert kernel.value("_agent_serve.server.rejected") > 0 and kernel.value("_agent_serve.calls") == []
