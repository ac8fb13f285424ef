"""Tool sources without a kernel: each names its tools and makes them, ``--tools`` resolves in one pass
(the first source that claims a word gets it), a run's plan turns options into limits, guards and an approver, and
the MCP source starts only the servers a run names (a real ``mcp-server-time``)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_servers import need

from agentkernel import Decision, ToolCall, tool
from agentkernel.errors import AgentConfigError
from agentkernel.jupyter.mcp_servers import KernelServers, MCPToolset
from agentkernel.jupyter.options import AgentOptions
from agentkernel.jupyter.plan import TOOL_ALIASES, RunPlan
from agentkernel.stop import StopSignal
from agentkernel.tools.toolsets import FileToolset, NamespaceToolset, StaticToolset, select


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


@tool(read_only=False)
def write(text: str) -> str:
    """Write a text."""
    return "written"


def kernelish() -> StaticToolset:
    return StaticToolset("a kernel tool", [lookup, write])


def sources(namespace: dict | None = None) -> list:
    return [NamespaceToolset(namespace or {}), FileToolset(), kernelish(),
            StaticToolset("a notebook tool", [tool(lambda: "", name="read_notebook")], TOOL_ALIASES)]


# -- one pass, first claim wins --------------------------------------------------------------------------------

def test_each_word_goes_to_the_first_source_that_claims_it():
    def read_file(path: str) -> str:
        return "the user's own"

    picked = select(["read_file", "lookup", "notebook_cells"], sources({"read_file": read_file}))
    tools = picked.tools()
    assert [t.name for t in tools] == ["read_file", "lookup", "read_notebook"]
    assert tools[0].fn is read_file  # the notebook's name shadows the built-in, as it always did
    assert tools[1] is lookup


def test_an_unknown_word_is_one_line_naming_every_source():
    with pytest.raises(AgentConfigError) as raised:
        select(["lookup", "nope"], sources())
    message = str(raised.value)
    assert message.startswith("unknown tool 'nope': use ") and "\n" not in message
    for part in ("a function or @tool in this notebook", "read_file", "lookup, write", "read_notebook"):
        assert part in message


def test_a_namespace_value_that_is_not_callable_is_refused_by_name():
    with pytest.raises(AgentConfigError, match="tool 'x' is a int, not a function or @tool"):
        select(["x"], sources({"x": 3})).tools()


def test_a_plain_function_becomes_a_tool_and_a_tool_stays_itself():
    def double(n: int) -> int:
        """Double n."""
        return 2 * n

    [made, kept] = select(["double", "lookup"], [NamespaceToolset({"double": double, "lookup": lookup})]).tools()
    assert made.name == "double" and made(n=2) == 4 and made.read_only
    assert kept is lookup


def test_file_tools_are_made_once_under_their_root(tmp_path: Path):
    (tmp_path / "a.txt").write_text("hello")
    files = FileToolset(str(tmp_path))
    assert files._made is None  # nothing made for a run that names none of them
    [read] = files.make("read_file")
    assert "hello" in read(path="a.txt")
    assert files.make("read_file")[0] is read and files.make("nope") == []


@settings(deadline=None)  # the first example imports and builds the file tools: slow on a loaded machine
@given(st.lists(st.sampled_from(["lookup", "write", "read_file", "list_dir", "notebook_cells", "read_notebook"]),
                max_size=12))
def test_the_tools_follow_the_words_each_once(words: list[str]):
    tools = select(words, sources()).tools()
    names = [t.name for t in tools]
    wanted = list(dict.fromkeys(TOOL_ALIASES.get(w, w) for w in words))
    assert names == wanted
    assert len({id(t) for t in tools}) == len(tools)


# -- the plan --------------------------------------------------------------------------------------------------

def test_the_plan_checks_values_and_carries_budgets_and_guards():
    plan = RunPlan.of(AgentOptions(max_tool_calls=4, max_seconds=9.5, repeat_limit=2))
    assert plan.limits.max_tool_calls == 4 and plan.limits.max_seconds == 9.5 and plan.limits.max_tokens is None
    assert plan.guards.repeat_limit == 2
    with pytest.raises(AgentConfigError, match="--text-repeats"):
        RunPlan.of(AgentOptions(text_repeats=1))
    with pytest.raises(AgentConfigError, match="--out needs a variable name"):
        RunPlan.of(AgentOptions(out="not a name"))


class Panel:
    def __init__(self, verdict: Decision):
        self.stop_signal = StopSignal()
        self.verdict = verdict
        self.asked: list[str] = []

    async def approve(self, call, tool, timeout, change=None):
        self.asked.append(call.name)
        return self.verdict


def verdict(approver, call_name: str = "write"):
    outcome = approver(ToolCall("c1", call_name, "{}"), write)
    return asyncio.run(outcome) if asyncio.iscoroutine(outcome) else outcome


def test_the_approver_asks_the_panel_denies_where_nobody_answers_and_allow_writes_runs():
    panel = Panel(Decision(True))
    plan = RunPlan.of(AgentOptions())
    assert verdict(plan.approver(panel, nobody=None)) == Decision(True) and panel.asked == ["write"]
    denied = verdict(plan.approver(panel, nobody="CI is set, so nobody is asked"))
    assert denied.approve is False and "CI is set" in denied.reason and "--allow-writes" in denied.reason
    assert panel.asked == ["write"]  # nobody was asked the second time
    allowed = verdict(RunPlan.of(AgentOptions(allow_writes=True)).approver(panel, nobody="CI"))
    assert allowed == Decision(True, reason="--allow-writes", by="policy")  # decided by policy, as the record says
    assert panel.asked == ["write"]  # and nobody was asked


# -- MCP servers as a source -----------------------------------------------------------------------------------

def write_config(path: Path, servers: dict) -> str:
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


def test_mcp_claims_servers_and_their_prefixes_and_reads_no_configuration_it_does_not_need(tmp_path: Path):
    config = write_config(tmp_path / "mcp.json", {"time": {"command": "mcp-server-time"}})
    mcp = MCPToolset(KernelServers(), config)
    assert mcp.config is None  # not read until a word asks for a server
    picked = select(["lookup", "time__convert_time"], [kernelish(), mcp])
    assert mcp.wanted == ["time"] and [w for _, w in picked.picks] == ["lookup", "time__convert_time"]
    assert not mcp.claims("clock") and mcp.wanted == ["time"]


def test_mcp_without_a_configuration_leaves_words_unknown_and_mcp_names_fail(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTKERNEL_MCP_CONFIG", raising=False)
    with pytest.raises(AgentConfigError, match="unknown tool 'time'"):
        select(["time"], [kernelish(), MCPToolset(KernelServers())])
    config = write_config(tmp_path / "mcp.json", {"time": {"command": "mcp-server-time"}})
    with pytest.raises(AgentConfigError, match="has no MCP server 'nosuch'.*time"):
        MCPToolset(KernelServers(), config, ["nosuch"])
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(AgentConfigError, match="broken.json"):
        select(["time"], [MCPToolset(KernelServers(), str(tmp_path / "broken.json"))])


def test_mcp_starts_only_the_named_servers_and_makes_their_tools(tmp_path: Path):
    need("mcp-server-time")
    config = write_config(tmp_path / "mcp.json", {"time": {"command": "mcp-server-time"},
                                                  "never": {"command": "no-such-command-here"}})

    async def main() -> None:
        servers = KernelServers()
        mcp = MCPToolset(servers, config)
        picked = select(["time__convert_time", "lookup"], [kernelish(), mcp])
        try:
            await mcp.start()
            assert list(servers.servers) == ["time"]  # "never" is configured but not named: not started
            assert [t.name for t in picked.tools()] == ["time__convert_time", "lookup"]
            assert mcp.untrusted() == {"time__get_current_time": "time", "time__convert_time": "time"}
            assert all(not t.read_only for t in mcp.make("time"))  # annotations not trusted: each call asks
            with pytest.raises(AgentConfigError, match="unknown tool 'time__nosuch'.*time__convert_time"):
                mcp.make("time__nosuch")
        finally:
            await servers.stop_all()

    asyncio.run(main())
    assert os.path.exists(config)
