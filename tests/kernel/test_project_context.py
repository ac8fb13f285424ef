"""A project's context in a real kernel: AGENTS.md instructions, the notebook's tagged cells, skills loaded on demand,
and MCP prompts and resources, against a loopback OpenAI server (what each request carries) and real MCP servers.

The kernel works in ``project/analysis``; ``--root`` is ``project``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_notebook import FakeNotebook, code_cell
from kernel_client import KernelSession, kernel_env
from mcp_servers import EVERYTHING, need, write_config
from openai_server import TEST_KEY, Reply, ScriptedServer, responses_events

SECRET = "ghp_ProjectInstructionToken0123456789abc"
PICTURES = Path(__file__).parents[1] / "mcp" / "picture_server.py"
SKILL = "---\nname: house-plots\ndescription: Plot in the house style.\n---\nThe palette is teal and sand.\n"
TAGGED = {"id": "rules", "cell_type": "markdown", "source": "Answer in French.", "execution_count": None,
          "has_error": False, "outputs_text": "", "metadata_agentkernel": None, "tags": ["agent-instructions"]}


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory, server: ScriptedServer) -> Iterator[KernelSession]:
    root = tmp_path_factory.mktemp("project_context")
    project = root / "project"
    (project / "analysis").mkdir(parents=True)
    (project / "AGENTS.md").write_text("Use polars, not pandas.")
    (project / "analysis" / "CLAUDE.md").write_text(f"Plots in the house style. The token is {SECRET}.")
    (project / "analysis" / "GEMINI.md").write_text("not read: CLAUDE.md comes first")
    skills = project / ".agents" / "skills"
    (skills / "house-plots").mkdir(parents=True)
    (skills / "house-plots" / "SKILL.md").write_text(SKILL)
    (skills / "broken").mkdir()
    (skills / "broken" / "SKILL.md").write_text("no front matter here\n")
    ks = KernelSession(project / "analysis", kernel_env(root, HOME=str(root / "home")))
    try:
        ks.ok("%load_ext agentkernel")
        ks.ok(f"import os\nos.environ.update(GITHUB_TOKEN={SECRET!r}, OPENAI_API_KEY={TEST_KEY!r}, "
              f"OPENAI_BASE_URL={server.url!r}, AGENTKERNEL_NONINTERACTIVE='1')\n"
              "%config AgentMagics.root = '..'\n"
              "from agentkernel import Call, ScriptedModel")
        yield ks
    finally:
        ks.shutdown()


def system_of(server: ScriptedServer, index: int = -1) -> str:
    return str(server.requests[index].body["instructions"])


def answer(server: ScriptedServer, *texts: str) -> None:
    server.add(*(Reply(responses_events([text])) for text in texts))


def test_instructions_in_order_with_their_sources(kernel: KernelSession, server: ScriptedServer) -> None:
    answer(server, "ok", "ok")
    first = kernel.run("%%agent -m gpt-4.1-mini --tools read_file\ngo")
    assert first.status == "ok", first.describe()
    system = system_of(server)
    assert system.index("## From AGENTS.md\n\nUse polars") < system.index("## From analysis/CLAUDE.md\n\nPlots")
    assert "GEMINI" not in system and "not read" not in system
    assert SECRET not in system and "[secret $GITHUB_TOKEN]" in system
    assert kernel.value("_agent.instructions") == ["AGENTS.md", "analysis/CLAUDE.md"]
    said = "instructions: AGENTS.md, analysis/CLAUDE.md · skills: house-plots"
    panel = [json.dumps(m["content"], ensure_ascii=False) for m in first.of_type("comm_msg")]
    assert any(said in update for update in panel)  # the panel's status line
    assert any(said in str(d.get("text/plain")) for d in first.displays)  # the record's headline
    # the malformed skill is reported once, naming its path; the good one is offered
    assert "skills/broken/SKILL.md is skipped: it has no front matter" in first.stdout
    assert "- house-plots: Plot in the house style." in system and "teal and sand" not in system

    again = kernel.run("%%agent -m gpt-4.1-mini --tools read_file --no-instructions\ngo")
    assert again.status == "ok" and "SKILL.md" not in again.stdout  # reported once per kernel
    system = system_of(server)
    assert "Project instructions" not in system and "polars" not in system
    assert kernel.value("_agent.instructions") == []
    assert SECRET not in json.dumps([r.body for r in server.requests])


def test_a_skill_body_reaches_the_model_only_after_load_skill(kernel: KernelSession, server: ScriptedServer) -> None:
    server.add(Reply(responses_events([], [("c1", "load_skill", '{"name": "house-plots"}')])))
    answer(server, "drawn")
    cell = kernel.run("%%agent -m gpt-4.1-mini --tools read_file\ndraw it")
    assert cell.status == "ok", cell.describe()
    first, second = (json.dumps(r.body) for r in server.requests[-2:])
    assert "house-plots" in first and "teal and sand" not in first
    assert "teal and sand" in second
    assert kernel.value("_agent.loaded_skills") == ["house-plots"]
    assert "skills: house-plots (loaded)" in kernel.value("'\\n'.join(_agent._summary_lines())")
    transcript = Path(kernel.value("_agent.transcript"))
    assert json.loads(transcript.read_text().splitlines()[0])["skills"] == ["house-plots"]


def test_tagged_cells_live_and_saved(kernel: KernelSession, server: ScriptedServer) -> None:
    # through the extension's read (the front end played by the test), once it has answered in this session
    kernel.ok("get_ipython()._agentkernel_notebook = None")
    server.add(Reply(responses_events([], [("c1", "read_notebook", "{}")])))
    answer(server, "read", "d'accord")
    code = "%%agent -m gpt-4.1-mini --tools read_file,read_notebook\ngo"
    notebook = FakeNotebook(kernel, [TAGGED, code_cell("agent", code)])
    notebook.run(notebook.submit(code))
    assert notebook.ops == ["hello", "read"]  # the first run's start: no hello of its own (nothing answered yet)
    notebook.run(notebook.submit(code))
    assert notebook.ops == ["hello", "read", "hello", "read"]  # the second's: the tagged cells, live
    system = system_of(server)
    assert system.index("analysis/CLAUDE.md") < system.index("## From the notebook's cells tagged "
                                                             "agent-instructions\n\nAnswer in French.")
    # no front end: the saved file the kernel's session names
    saved = {"cells": [{**TAGGED, "source": ["Answer in ", "Spanish."], "metadata": {"tags": ["agent-instructions"]}},
                       {"cell_type": "code", "source": "x = 1", "metadata": {}, "outputs": []}],
             "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    kernel.ok(f"open('study.ipynb', 'w').write({json.dumps(saved)!r}); __session__ = 'study.ipynb'")
    answer(server, "vale")
    assert kernel.run("%%agent -m gpt-4.1-mini --tools read_file\ngo").status == "ok"
    assert "Answer in Spanish." in system_of(server)
    kernel.ok("del __session__")


def test_mcp_prompts_and_resources(kernel: KernelSession) -> None:
    need(everything=True)
    write_config(Path(kernel.value("os.getcwd()")) / ".mcp.json", {"mcpServers": {
        "everything": {"command": "node", "args": [str(EVERYTHING)]},
        "pictures": {"command": sys.executable, "args": [str(PICTURES)]}}})
    listing = kernel.ok("%agent_mcp prompts", timeout=60).stdout
    assert "everything/simple-prompt  A prompt with no arguments" in listing
    assert "everything/args-prompt city=… state=…?" in listing and "pictures/review chart=…" in listing

    kernel.ok("m = ScriptedModel(['done'])")
    cell = kernel.run("%%agent -m m --tools read_file --prompt everything/args-prompt city=Oslo\nBe brief.",
                      timeout=60)
    assert cell.status == "ok", cell.describe()
    prompt = kernel.value("_agent.history[0]['content']")
    assert "Oslo" in prompt and prompt.endswith("\n\nBe brief.")
    bad = kernel.run("%%agent -m m --prompt everything/args-prompt\n", timeout=60)
    assert "--prompt everything/args-prompt:" in bad.describe() and "Traceback" not in bad.describe()

    kernel.ok("m = ScriptedModel([[Call('read_resource', {'uri': 'demo://resource/static/document/features.md'}), "
              "Call('read_resource', {'uri': 'pictures://grey.png'}), "
              "Call('read_resource', {'uri': 'demo://nope', 'server': 'everything'})], 'done'])")
    cell = kernel.run("%%agent -m m --tools read_file --mcp everything,pictures\nread", timeout=60)
    assert cell.status == "ok", cell.describe()
    text, image, unknown = kernel.value(
        "[i['output'] for i in _agent.history if i['type'] == 'function_call_output']")
    assert "# Everything Server - Features" in text
    assert image.startswith("[image/png 12x12 from server pictures")
    assert "MCP server 'everything' could not read 'demo://nope'" in unknown and "not found" in unknown
    assert [mime for mime, _, _ in cell.record_images()] == ["image/png"], cell.displays[-1]
