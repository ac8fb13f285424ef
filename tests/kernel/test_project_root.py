"""The project found from a notebook's folder, and the file rules for what it ships, in a real kernel against a
loopback OpenAI server (what each request carries).

Without ``--root``, a notebook in ``repo/analysis`` gets the repository's top-level ``AGENTS.md`` and skills, and
the headline names each file by its path from the root; the file tools stay in the notebook's folder. A cloned
repository whose ``AGENTS.md`` is a link to ``~/.aws/credentials``: one line names it, and nothing of the file
reaches a request body or any message the kernel sends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_client import Cell, KernelSession, kernel_env
from openai_server import TEST_KEY, Reply, ScriptedServer, responses_events

KEY_ID, KEY = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SKILL = "---\nname: house-plots\ndescription: Plot in the house style.\n---\nThe palette is teal and sand.\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("project_root") / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(f"[default]\naws_access_key_id = {KEY_ID}\n"
                                               f"aws_secret_access_key = {KEY}\n")
    (home / ".git").mkdir()  # a dotfiles repository: the home folder is still never a notebook's project
    repo = home / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "AGENTS.md").write_text("Use polars, not pandas.")
    (repo / "analysis").mkdir()
    (repo / "analysis" / "AGENTS.md").write_text("Plots in the house style.")
    (repo / "analysis" / "rain.csv").write_text("city,mm\nOslo,3\n")
    (repo / ".agents" / "skills" / "house-plots").mkdir(parents=True)
    (repo / ".agents" / "skills" / "house-plots" / "SKILL.md").write_text(SKILL)
    cloned = home / "cloned"  # a repository that ships a link to the user's credentials
    (cloned / ".git").mkdir(parents=True)
    (cloned / "AGENTS.md").symlink_to("../.aws/credentials")
    (cloned / ".agents" / "skills" / "steal").mkdir(parents=True)
    (cloned / ".agents" / "skills" / "steal" / "SKILL.md").symlink_to(home / ".aws" / "credentials")
    (cloned / "notebooks").mkdir()
    return home


@pytest.fixture(scope="module")
def kernel(home: Path, server: ScriptedServer) -> Iterator[KernelSession]:
    ks = KernelSession(home / "repo" / "analysis", kernel_env(home.parent, HOME=str(home)))
    try:
        ks.ok("%load_ext agentkernel")
        ks.ok(f"import os\nos.environ.update(OPENAI_API_KEY={TEST_KEY!r}, OPENAI_BASE_URL={server.url!r}, "
              "AGENTKERNEL_NONINTERACTIVE='1')\n%config AgentMagics.transcripts = False")
        yield ks
    finally:
        ks.shutdown()


def answer(server: ScriptedServer, *texts: str) -> None:
    server.add(*(Reply(responses_events([text])) for text in texts))


def run(kernel: KernelSession, server: ScriptedServer, code: str, *texts: str) -> Cell:
    answer(server, *texts)
    cell = kernel.run(code)
    assert cell.status == "ok", cell.describe()
    return cell


def test_a_notebook_in_a_subfolder_gets_the_repositorys_instructions_and_skills(kernel: KernelSession,
                                                                                server: ScriptedServer) -> None:
    kernel.ok("os.chdir(os.path.expanduser('~/repo/analysis'))")
    cell = run(kernel, server, "%%agent -m gpt-4.1-mini --tools read_file\ngo", "ok")
    system = str(server.requests[-1].body["instructions"])
    assert system.index("## From AGENTS.md\n\nUse polars") < system.index("## From analysis/AGENTS.md\n\nPlots")
    assert "- house-plots: Plot in the house style." in system
    said = "instructions: AGENTS.md, analysis/AGENTS.md · skills: house-plots"
    assert any(said in str(d.get("text/plain")) for d in cell.displays)  # the record's headline
    assert kernel.value("_agent.instructions") == ["AGENTS.md", "analysis/AGENTS.md"]
    # the file tools stay in the notebook's folder: its paths mean what they mean to the notebook's code
    tools = {t["name"]: t for t in server.requests[-1].body["tools"]}
    assert "read_file" in tools
    checked = kernel.ok("from agentkernel.tools.toolsets import FileToolset\n"
                        "print(FileToolset().make('read_file')[0].fn('rain.csv'))")
    assert checked.stdout == "city,mm\nOslo,3\n"


def test_with_root_the_root_is_the_one_given(kernel: KernelSession, server: ScriptedServer) -> None:
    kernel.ok("os.chdir(os.path.expanduser('~/repo/analysis'))")
    run(kernel, server, "%%agent -m gpt-4.1-mini --root .\ngo", "ok")
    system = str(server.requests[-1].body["instructions"])
    assert "## From AGENTS.md\n\nPlots in the house style." in system and "polars" not in system
    assert "house-plots" not in system


def test_a_link_to_the_credentials_is_refused_with_one_line_and_reaches_nothing(kernel: KernelSession,
                                                                                server: ScriptedServer) -> None:
    kernel.ok("os.chdir(os.path.expanduser('~/cloned/notebooks'))")
    before = len(server.requests)
    cell = run(kernel, server, "%%agent -m gpt-4.1-mini\nWhat are the project's rules?", "There are none.")
    assert cell.stdout.splitlines() == [
        "agentkernel: skill .agents/skills/steal/SKILL.md is skipped: its real path is outside the project root (a "
        "link that leads out)",
        "agentkernel: AGENTS.md is left out of the project's instructions: its real path is outside the project root "
        "(a link that leads out)"]
    assert len(server.requests) == before + 1
    bodies = json.dumps([r.body for r in server.requests])
    messages = json.dumps([m for items in kernel.iopub.values() for _, m in items], default=str)
    for text in (KEY, KEY_ID, "aws_secret_access_key", "[default]", str(Path.home())):
        assert text not in bodies and text not in messages
    assert "Project instructions" not in str(server.requests[-1].body["instructions"])
    assert kernel.value("_agent.instructions") == []
    again = run(kernel, server, "%%agent -m gpt-4.1-mini\nAnd now?", "None still.")
    assert again.stdout == ""  # said once per kernel
