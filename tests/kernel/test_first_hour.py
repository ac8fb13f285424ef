"""A stranger's first hour, in a real kernel: the README's session run twice gives the same answers, a
run stopped at its approval leaves the next run its tool call, each missing SDK is one line naming its ``pip
install`` and leaves ``_agent``, a misspelt provider gets a suggestion, and another project's ``agentkernel``
installed beside this one is named at ``%load_ext``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_client import KernelSession, agent_kernel

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def readme_session() -> tuple[list[str], str, list[str]]:
    """The README's "A short session": its setup cells, the ``%%agent`` cell, and the value its comment shows."""
    section = README.split("## A short session", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)
    agent = next(b for b in blocks if b.startswith("%%agent"))
    setup = blocks[: blocks.index(agent)]
    check = next(b for b in blocks[blocks.index(agent) + 1:] if "# (" in b)
    expression, shown = check.split("\n# ", 1)
    return setup, agent.strip(), [expression.strip(), shown.strip()]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with agent_kernel(tmp_path_factory.mktemp("first_hour"), {"README.md": README}) as ks:
        ks.ok("%config AgentMagics.transcripts = False\nimport os, sys\nos.environ.pop('CI', None)")
        yield ks


def one_line(cell, ename: str = "AgentConfigError") -> str:
    (error,) = cell.errors
    assert error["ename"] == ename and len(error["traceback"]) == 1 and "\n" not in error["evalue"], cell.describe()
    return error["evalue"]


def test_the_readme_session_run_twice_in_one_kernel_gives_the_same_answers(kernel: KernelSession):
    setup, agent, (expression, shown) = readme_session()
    answers = []
    for _ in range(2):  # the whole session, then the agent cell alone again
        for code in setup:
            kernel.ok(code)
        for _ in range(2):
            cell = kernel.run(agent)
            assert cell.status == "ok" and not cell.errors, cell.describe()
            answers.append(kernel.value(f"repr(({expression}))"))
    assert answers == [shown] * 4


def test_a_run_stopped_at_its_approval_leaves_the_next_run_its_tool_call(kernel: KernelSession):
    kernel.ok("from agentkernel import Call, ScriptedModel, tool\n"
              "notes = []\n"
              "@tool(read_only=False)\n"
              "def write_note(text: str) -> str:\n"
              "    'Write a note (a side effect).'\n"
              "    notes.append(text)\n"
              "    return 'written'\n"
              "m = ScriptedModel([Call('write_note', {'text': 'hi'}), 'Noted.'])")
    cell = kernel.submit("%%agent -m m --tools write_note\nNote hi.")
    stop = cell.wait_for_button("Stop")
    cell.wait_for_button("Approve")
    kernel.click(stop)
    cell.wait(30)
    assert kernel.value("(_agent.status, notes)") == ["aborted", []]
    again = kernel.run("%%agent -m m --tools write_note --allow-writes\nNote hi.")
    assert again.status == "ok", again.describe()
    assert kernel.value("(_agent.status, _agent.answer, _agent.tool_calls, notes)") == ["complete", "Noted.", 1,
                                                                                     ["hi"]]


def test_a_scripted_list_that_runs_out_says_so_in_its_run(kernel: KernelSession):
    kernel.ok("from agentkernel import Call, ScriptedModel\nshort = ScriptedModel([Call('list_dir', {'path': '.'})])")
    for _ in range(2):  # the same words each time: the second run does not start past the end
        cell = kernel.run("%%agent -m short --tools list_dir\nLook.")
        assert "has no turn 2 (it holds 1, and this run has used them all" in cell.errors[0]["evalue"], cell.describe()


# -- a missing SDK: one line naming the pip install, and _agent --------------------------------------------------

HIDE = """\
def hide(name):
    '''Make `name` not installed: importing it fails as a missing package does (the adapters import it again).'''
    saved = {m: sys.modules.pop(m) for m in list(sys.modules)
             if m.split('.')[0] == name or m.startswith(('agentkernel.models.openai', 'agentkernel.models._openai',
                                                         'agentkernel.models.anthropic'))}
    sys.modules[name] = None
    return saved

def show(saved, name):
    del sys.modules[name]
    sys.modules.update(saved)
"""


@pytest.mark.parametrize(("module", "line", "needs"), [
    ("anthropic", "%%agent -m anthropic:claude-sonnet-4-5\nhi",
     "anthropic: models need the anthropic package, which is not installed: "
     "pip install 'jupyter-agentkernel[anthropic]'"),
    ("openai", "%%agent -m gpt-4.1-mini\nhi",
     "OpenAI and OpenAI-compatible models need the openai package, which is not installed: pip install openai"),
    ("openai", "%%agent --api chat -m ollama:qwen3\nhi",
     "OpenAI and OpenAI-compatible models need the openai package, which is not installed: pip install openai"),
    ("mcp", "%%agent -m m --mcp clock\nhi",
     "MCP servers need the mcp package, which is not installed: pip install 'jupyter-agentkernel[mcp]'"),
    ("genai_prices", "%%agent -m gpt-4.1-mini --max-cost 0.5\nhi",
     "--max-cost needs a price, and none is known for the model 'gpt-4.1-mini' (a price from genai-prices' data "
     "needs the genai-prices package, which is not installed: pip install genai-prices): give --price "),
])
def test_a_missing_sdk_is_one_line_naming_the_pip_install_and_agent_holds_it(kernel: KernelSession, tmp_path: Path,
                                                                             module: str, line: str, needs: str):
    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {"clock": {"command": "python", "args": ["-c", "pass"]}}}')
    kernel.ok(f"{HIDE}\nfrom agentkernel import ScriptedModel\nm = ScriptedModel(['hi'])\n"
              f"os.environ.update(OPENAI_API_KEY='sk-test-0123456789abcdef', ANTHROPIC_API_KEY='sk-ant-test-012345',"
              f" AGENTKERNEL_MCP_CONFIG={str(config)!r})\n_agent = None\nsaved = hide({module!r})")
    try:
        cell = kernel.run(line)
    finally:
        kernel.ok(f"show(saved, {module!r})\n"
                  "for k in ('OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'AGENTKERNEL_MCP_CONFIG'):\n    os.environ.pop(k)")
    assert one_line(cell).startswith(needs), cell.describe()
    assert "Traceback" not in cell.stdout + cell.stderr and "ModuleNotFoundError" not in cell.stderr
    status, detail = kernel.value("(_agent.status, _agent.detail)")
    assert status == "fatal_error" and detail.startswith(needs)


def test_a_misspelt_provider_gets_the_one_it_is_close_to(kernel: KernelSession):
    kernel.ok("os.environ['OPENAI_API_KEY'] = 'sk-test-0123456789abcdef'")  # so it is not the missing key
    try:
        cell = kernel.run("%%agent -m antropic:claude-sonnet-4-5\nhi")
    finally:
        kernel.ok("os.environ.pop('OPENAI_API_KEY')")
    message = one_line(cell)
    assert "did you mean anthropic:claude-sonnet-4-5?" in message and "OPENAI_API_KEY" not in message, message
    assert kernel.value("_agent.status") == "fatal_error"
    # A name with a colon for a local server is no typo (Ollama's qwen3:8b, llama3:8b)
    kernel.ok("from agentkernel import ScriptedModel")
    local = kernel.run("%%agent --api chat --base-url http://127.0.0.1:9/v1 -m llama3:8b --max-seconds 5\nhi")
    assert "did you mean" not in local.describe()


# -- another project's agentkernel ---------------------------------------------------------------------------------

def test_another_projects_agentkernel_installed_beside_this_one_is_named_at_load_ext(kernel: KernelSession,
                                                                                     tmp_path: Path):
    foreign = tmp_path / "site"
    (foreign / "agentkernel").mkdir(parents=True)
    (foreign / "agentkernel" / "__init__.py").write_text('"""Agent Kernel Python Distribution."""\n')
    info = foreign / "agentkernel-0.9.5.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agentkernel\nVersion: 0.9.5\n"
                                   "Summary: Agent Kernel - Unified AI Agents Runtime\n")
    (info / "RECORD").write_text("agentkernel/__init__.py,,\n")
    reload = "get_ipython().extension_manager.unload_extension('agentkernel')\n%load_ext agentkernel"
    assert kernel.ok(reload).stdout == ""
    kernel.ok(f"sys.path.append({str(foreign)!r})")
    try:
        clash = kernel.ok(reload).stdout
    finally:
        kernel.ok(f"sys.path.remove({str(foreign)!r})")
    assert clash.count("\n") == 1, clash
    assert f"the distribution agentkernel 0.9.5 (another project) is installed in {foreign}" in clash, clash
    assert clash.strip().endswith("fix: pip uninstall agentkernel && pip install --force-reinstall jupyter-agentkernel")
    kernel.ok("from agentkernel import ScriptedModel\nm = ScriptedModel(['hi'])")
    assert kernel.run("%%agent -m m\nhi").status == "ok"  # still this package's magic


# -- where runs are stored -----------------------------------------------------------------------------------------

def test_the_first_transcript_writing_run_says_where_once_and_no_transcript_writes_none(tmp_path: Path):
    def told(cell) -> list[str]:
        return [m["content"]["data"]["state"]["value"] for m in cell.of_type("comm_open", "comm_msg")
                if "runs are saved in" in str(m["content"]["data"].get("state", {}).get("value", ""))]

    def runs(folder: Path) -> int:
        return len(list(folder.glob("*.jsonl"))) if folder.is_dir() else 0

    folder = tmp_path / "transcripts"  # kernel_env's AGENTKERNEL_TRANSCRIPTS
    with agent_kernel(tmp_path) as ks:
        ks.ok("import os\nos.environ.pop('CI', None)\nfrom agentkernel import ScriptedModel\n"
              f"m = ScriptedModel(['hi'])\nos.environ['HOME'] = {str(tmp_path)!r}")  # the folder is shown under ~
        off = ks.run("%%agent -m m --no-transcript\nhello")  # writes none, and so says nothing
        assert off.status == "ok" and told(off) == [] and runs(folder) == 0, off.describe()
        assert ks.value("_agent.transcript") is None
        first = ks.run("%%agent -m m\nhello")
        (line,) = set(told(first))
        assert "runs are saved in ~/transcripts (the newest 200 kept; --no-transcript: none)" in line, line
        assert runs(folder) == 1 and ks.value("_agent.transcript").startswith(str(folder))
        second = ks.run("%%agent -m m\nhello")
        assert told(second) == [] and runs(folder) == 2  # said once per kernel
        for setting in ('""', "False"):
            ks.ok(f"%config AgentMagics.transcripts = {setting}")
            assert ks.run("%%agent -m m\nhello").status == "ok" and runs(folder) == 2
        ks.ok("%config AgentMagics.transcripts = 'elsewhere'")
        assert ks.run("%%agent -m m\nhello").status == "ok" and runs(ks.cwd / "elsewhere") == 1
        assert ks.value("_agent.transcript").startswith(str(ks.cwd / "elsewhere"))
        ks.ok("%config AgentMagics.transcripts = True")  # the default folder again
        assert ks.run("%%agent -m m --no-transcript\nhello").status == "ok" and runs(folder) == 2
