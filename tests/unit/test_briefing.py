"""The loop with project instructions and skills: what the model is told, when a skill's body reaches it, what the
result and the transcript record."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentkernel import Call, ScriptedModel
from agentkernel.instructions import Instruction, instruction_files
from agentkernel.loop import AgentLoop
from agentkernel.models.base import ModelRequest
from agentkernel.secrets import KERNEL, marker
from agentkernel.skills import find_skills

SKILL = "---\nname: house-plots\ndescription: Plot in the house style.\n---\nThe palette is teal and sand.\n"


def run(tmp_path: Path, script: list, **options) -> tuple[list[ModelRequest], AgentLoop]:
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest):  # a copy: the request's history is the loop's, and grows
        seen.append(ModelRequest(request.system, json.loads(json.dumps(request.history)), request.tools))
        return script[len(seen) - 1]

    loop = AgentLoop(ScriptedModel(answer), transcript=tmp_path / "run.jsonl", **options)
    asyncio.run(loop.run("draw it"))
    return seen, loop


def test_instructions_and_skill_names_first_body_only_after_load_skill(tmp_path: Path) -> None:
    (tmp_path / "skills" / "house-plots").mkdir(parents=True)
    (tmp_path / "skills" / "house-plots" / "SKILL.md").write_text(SKILL)
    (tmp_path / "AGENTS.md").write_text("Use polars, not pandas.")
    seen, loop = run(tmp_path, [Call("load_skill", {"name": "house-plots"}), "done"],
                     instructions=instruction_files(tmp_path, tmp_path), skills=find_skills([tmp_path / "skills"]))
    first, second = seen
    assert "## From AGENTS.md\n\nUse polars, not pandas." in first.system
    assert "- house-plots: Plot in the house style." in first.system
    assert "teal and sand" not in json.dumps([first.system, first.history])
    assert "teal and sand" in json.dumps(second.history)
    assert any(t["name"] == "load_skill" for t in first.tools)
    result = loop.result
    assert result is not None and result.instructions == ["AGENTS.md"] and result.skills == ["house-plots"]
    assert result.loaded_skills == ["house-plots"]
    assert "instructions: AGENTS.md · skills: house-plots (loaded)" in "\n".join(result._summary_lines())
    start = json.loads((tmp_path / "run.jsonl").read_text().splitlines()[0])
    assert start["instructions"] == ["AGENTS.md"] and start["skills"] == ["house-plots"]


def test_a_failed_load_is_not_counted_and_no_skills_no_tool(tmp_path: Path) -> None:
    (tmp_path / "s" / "house-plots").mkdir(parents=True)
    (tmp_path / "s" / "house-plots" / "SKILL.md").write_text(SKILL)
    _, loop = run(tmp_path, [Call("load_skill", {"name": "nope"}), "done"], skills=find_skills([tmp_path / "s"]))
    assert loop.result is not None and loop.result.loaded_skills == []
    seen, loop = run(tmp_path, ["done"])
    assert not seen[0].tools and loop.result is not None and loop.result.skills == []


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "sk-proj-" + "q7Zt" * 10
    monkeypatch.setenv("PROJECT_API_TOKEN", value)
    KERNEL.refresh()
    yield value
    monkeypatch.delenv("PROJECT_API_TOKEN")
    KERNEL.refresh()


def test_a_secret_in_an_instruction_reaches_the_model_as_its_marker(tmp_path: Path, secret: str) -> None:
    seen, loop = run(tmp_path, ["done"], instructions=[Instruction("AGENTS.md", f"the key is {secret}")])
    assert secret not in seen[0].system and marker("PROJECT_API_TOKEN") in seen[0].system
    assert secret not in (tmp_path / "run.jsonl").read_text()
