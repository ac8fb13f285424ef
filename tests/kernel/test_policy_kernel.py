"""An admin's policy no cell can exceed, and the gateway's budget, in a real kernel started as a hub's spawner
starts it: ``JUPYTER_CONFIG_PATH`` names a folder holding ``agentkernel_policy.json``; the model is a loopback
server (counting requests) or a loopback gateway that answers as the LiteLLM proxy does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_server import GatewayServer
from kernel_client import KernelSession, kernel_env
from openai_server import Reply, ScriptedServer, chat_events

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = ''
%config AgentMagics.max_cost = 0.0
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTKERNEL_MODEL"):
    os.environ.pop(_name, None)
from agentkernel import tool

@tool
def lookup(word: str) -> str:
    "Look a word up."
    return word + " means something"
"""
STUDENT_KEY = "sk-student-01-VIRTUAL-KEY-0123456789"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hub_config")


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> Iterator[KernelSession]:
    root = tmp_path_factory.mktemp("policy_kernel")
    (root / "cwd").mkdir()
    ks = KernelSession(root / "cwd", kernel_env(root, JUPYTER_CONFIG_PATH=str(hub)))
    try:
        ks.ok("%load_ext agentkernel")
        yield ks
    finally:
        ks.shutdown()


@pytest.fixture
def kernel(session: KernelSession, hub: Path) -> Iterator[KernelSession]:
    session.ok(SETUP)
    yield session
    (hub / "agentkernel_policy.json").unlink(missing_ok=True)


def policy(hub: Path, rules: object) -> str:
    path = hub / "agentkernel_policy.json"
    path.write_text(json.dumps(rules))
    return str(path)


def refusal(cell) -> str:
    """The cell's one line: an AgentConfigError without stack frames, and no panel (the run never started)."""
    (error,) = cell.errors
    assert error["ename"] == "AgentConfigError" and len(error["traceback"]) == 1, cell.describe()
    assert "\n" not in error["evalue"] and not cell.displays, cell.describe()
    return str(error["evalue"])


def test_a_model_outside_the_list_is_refused_before_any_request(kernel: KernelSession, hub: Path):
    file = policy(hub, {"models": ["gpt-4.1-mini", "ollama:*"]})
    with ScriptedServer(Reply(chat_events(["fine"]))) as server:
        cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m gpt-5\nhello")
        assert refusal(cell) == (f"the model 'gpt-5': refused by the agentkernel policy (models = [\"gpt-4.1-mini\", "
                                 f"\"ollama:*\"] in {file})")
        kernel.ok("%config AgentMagics.model = 'o3'")
        try:
            assert "the model 'o3': refused" in refusal(kernel.run(f"%%agent --api chat --base-url {server.url}\nhi"))
        finally:
            kernel.ok("%config AgentMagics.model = ''")
        assert server.requests == []
        kernel.ok(f"%%agent --api chat --base-url {server.url} -m gpt-4.1-mini\nhello")  # within the list: it runs
    assert len(server.requests) == 1


def test_a_cost_above_the_ceiling_is_refused_from_the_cell_and_from_config(kernel: KernelSession, hub: Path):
    file = policy(hub, {"max_cost": 0.5, "max_seconds": 60})
    with ScriptedServer(Reply(chat_events(["fine"]))) as server:
        cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m small --max-cost 1\nhello")
        assert refusal(cell) == (f"--max-cost 1 (from the cell or %config AgentMagics.max_cost): refused by the "
                                 f"agentkernel policy (max_cost = 0.5 in {file})")
        kernel.ok("%config AgentMagics.max_cost = 2.0")
        try:
            cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m small\nhello")
            assert refusal(cell).startswith("--max-cost 2 (from the cell or %config AgentMagics.max_cost): refused")
        finally:
            kernel.ok("%config AgentMagics.max_cost = 0.0")
        assert "--max-seconds 61" in refusal(kernel.run(f"%%agent --api chat --base-url {server.url} -m small "
                                                        "--max-seconds 61\nhello"))
        unpriced = refusal(kernel.run(f"%%agent --api chat --base-url {server.url} -m small\nhello"))
        assert unpriced.startswith("a run of the model 'small', whose price is not known, so its cost cannot be held "
                                   "(give --price IN,OUT") and unpriced.endswith(f"(max_cost = 0.5 in {file})")
        assert server.requests == []
        kernel.ok(f"%%agent --api chat --base-url {server.url} -m small --max-cost 0.25 --max-seconds 30 "
                  "--price 0.1,0.1\nhello")
    assert len(server.requests) == 1


def test_serving_when_the_policy_turns_it_off(kernel: KernelSession, hub: Path):
    file = policy(hub, {"serve": False})
    cell = kernel.run("%agent_serve")
    assert refusal(cell) == (f"%agent_serve (serving this kernel's tools): refused by the agentkernel policy "
                             f"(serve = false in {file})")
    assert kernel.value("'_agent_serve' in dir()") is False


def test_an_mcp_server_not_allowed_is_refused_before_it_starts(kernel: KernelSession, hub: Path, tmp_path: Path):
    file = policy(hub, {"mcp_servers": ["docs"], "tools": ["read_file", "lookup", "docs__*"]})
    marker = tmp_path / "started"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"other": {"command": "python", "args": [
        "-c", f"open({str(marker)!r}, 'w').write('started')"]}}}))
    with ScriptedServer(Reply(chat_events(["fine"]))) as server:
        base = f"%%agent --api chat --base-url {server.url} -m small --mcp-config {config}"
        assert refusal(kernel.run(f"{base} --mcp other\nhello")) == (
            f"the MCP server 'other': refused by the agentkernel policy (mcp_servers = [\"docs\"] in {file})")
        assert "the MCP server 'other': refused" in refusal(kernel.run(f"{base} --tools other\nhello"))
        assert "the tool 'run_python': refused" in refusal(kernel.run(f"{base} --tools lookup,run_python\nhello"))
        assert server.requests == [] and not marker.exists()
        kernel.ok(f"{base} --tools lookup\nhello")
    assert [t["function"]["name"] for t in server.requests[0].body["tools"]] == ["lookup"]


def test_agent_policy_shows_what_is_in_force_and_a_broken_file_closes_every_run(kernel: KernelSession, hub: Path):
    assert "no agentkernel policy: no agentkernel_policy.json in " + str(hub) in kernel.ok("%agent_policy").stdout
    file = policy(hub, {"max_cost": 0.5, "serve": False, "models": ["gpt-4.1-mini"]})
    shown = kernel.ok("%agent_policy").stdout
    assert f"agentkernel policy from {file}:" in shown
    assert "max_cost        0.5" in shown and "serve           false" in shown and "gpt-4.1-mini" in shown
    (hub / "agentkernel_policy.json").write_text('{"max_cost": 0.5,')  # cut in half
    with ScriptedServer(Reply(chat_events(["fine"]))) as server:
        line = refusal(kernel.run(f"%%agent --api chat --base-url {server.url} -m small\nhello"))
        assert line.startswith(f"the agentkernel policy {file} is not JSON") and "no run is allowed" in line
        assert line in kernel.ok("%agent_policy").stdout
        (hub / "agentkernel_policy.json").write_text('{"max_cost": "0.5"}')  # a wrong type: closed too
        assert 'has max_cost = "0.5", not a number' in refusal(
            kernel.run(f"%%agent --api chat --base-url {server.url} -m small\nhello"))
        assert server.requests == []


def test_the_gateway_budget_is_shown_caps_the_run_and_ends_it(kernel: KernelSession):
    call = Reply(chat_events(calls=[("c1", "lookup", ['{"word": "apple"}'])]))
    answer = Reply(chat_events(["Apple means something."]))
    with GatewayServer(STUDENT_KEY, call, answer, call, answer, max_budget=0.01, cost=0.004) as gateway:
        kernel.ok(f"os.environ['OPENAI_API_KEY'] = {STUDENT_KEY!r}; os.environ['OPENAI_BASE_URL'] = {gateway.url!r}")
        first = kernel.run("%%agent --api chat -m gpt-4.1-mini --tools lookup\ndefine apple", timeout=60)
        assert first.status == "ok", first.describe()
        assert any("the gateway key has spent $0.0000 of $0.0100 ($0.0100 left)" in json.dumps(m["content"])
                   for m in first.messages), "the panel shows the key's budget"
        assert ("agentkernel: the gateway key has spent $0.0080 of $0.0100 ($0.0020 left); this run: $0.0080"
                in first.stdout), first.describe()
        second = kernel.run("%%agent --api chat -m gpt-4.1-mini --tools lookup\ndefine apple again", timeout=60)
        (error,) = second.errors
        assert error["ename"] == "GatewayBudget" and error["evalue"].startswith(
            "GATEWAY_BUDGET: the gateway refused the request: the key's budget is spent (Budget has been exceeded!")
        assert kernel.value("(_agent.status, len(_agent.partial_findings))") == ["gateway_budget", 1]
        assert "this run: $0.0040" in second.stdout
        asked = len(gateway.requests)
        third = kernel.run("%%agent --api chat -m gpt-4.1-mini\nhello", timeout=30)
        assert refusal(third).startswith("GATEWAY_BUDGET: the gateway key has spent $0.0120 of $0.0100 ($0.0000 "
                                         "left): the gateway refuses")
        assert len(gateway.requests) == asked  # refused at once, no model request
        for cell in (first, second, third):
            assert STUDENT_KEY not in json.dumps([m["content"] for m in cell.messages])


def test_the_key_budget_caps_the_runs_cost(kernel: KernelSession):
    with GatewayServer(STUDENT_KEY, Reply(chat_events(["fine"])), max_budget=1.0, cost=0.1, spend=0.75) as gateway:
        kernel.ok(f"os.environ['OPENAI_API_KEY'] = {STUDENT_KEY!r}; os.environ['OPENAI_BASE_URL'] = {gateway.url!r}")
        cell = kernel.run("%%agent --api chat -m gpt-4.1-mini --max-cost 5 --price 1,1\nhello", timeout=60)
        assert cell.status == "ok", cell.describe()
        assert any("cost" in json.dumps(m["content"]) and '"max": 0.25' in json.dumps(m["content"])
                   for m in cell.messages), "the cost bar's budget is what the key has left"


def test_a_blocking_cell_shows_the_gateway_budget_too(kernel: KernelSession):
    with GatewayServer(STUDENT_KEY, Reply(chat_events(["fine"])), max_budget=1.0, cost=0.1) as gateway:
        kernel.ok(f"os.environ['OPENAI_API_KEY'] = {STUDENT_KEY!r}; os.environ['OPENAI_BASE_URL'] = {gateway.url!r}")
        kernel.ok("%autoawait off")
        try:
            cell = kernel.run("%%agent --api chat -m gpt-4.1-mini\nhello", timeout=60)
        finally:
            kernel.ok("%autoawait on")
        assert cell.status == "ok", cell.describe()
        assert "the gateway key has spent $0.1000 of $1.0000 ($0.9000 left); this run: $0.1000" in cell.stdout
        assert gateway.info_requests == 2
