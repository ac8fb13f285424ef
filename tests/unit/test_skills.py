"""Agent Skills: finding them, reporting the malformed ones, and load_skill."""

from __future__ import annotations

import asyncio
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkernel.skills import find_skills, load_skill_tool, parse_front_matter, skill_folders, skills_prompt
from agentkernel.tools import ToolCall, ToolRunner


def skill(folder: Path, name: str, text: str) -> Path:
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / "SKILL.md").write_text(text)
    return folder / name


GOOD = "---\nname: house-plots\ndescription: Plot in the house style.\n---\n\nUse the palette in palette.json.\n"


def test_found_listed_and_loaded(tmp_path: Path) -> None:
    folder = skill(tmp_path / ".agents" / "skills", "house-plots", GOOD)
    (folder / "palette.json").write_text('{"main": "#123456"}')
    (folder / "scripts").mkdir()
    (folder / "scripts" / "plot.py").write_text("print('plot')\n")
    skills = find_skills(skill_folders(tmp_path)[:1])
    assert [s.name for s in skills.found] == ["house-plots"] and skills.problems == []
    prompt = skills_prompt(skills.found)
    assert "- house-plots: Plot in the house style." in prompt and "palette" not in prompt

    load = load_skill_tool(skills)
    assert load.read_only
    body = load.fn("house-plots")
    assert body.startswith("Use the palette in palette.json.") and "palette.json, scripts/plot.py" in body
    assert "#123456" in load.fn("house-plots", file="palette.json")


def test_load_skill_refusals_go_through_the_runner(tmp_path: Path) -> None:
    skill(tmp_path, "house-plots", GOOD)
    load = load_skill_tool(find_skills([tmp_path]))
    calls = [ToolCall("c1", "load_skill", '{"name": "nope"}'),
             ToolCall("c2", "load_skill", '{"name": "house-plots", "file": "../../etc/passwd"}'),
             ToolCall("c3", "load_skill", '{"name": "house-plots", "file": "missing.txt"}')]
    results = asyncio.run(ToolRunner({"load_skill": load}).run(calls))
    assert [r.status for r in results] == ["error"] * 3
    assert "there is no skill 'nope'; the skills are: house-plots" in results[0].output
    assert "outside" in results[1].output and "missing.txt" in results[2].output


@pytest.mark.parametrize("text, why", [
    ("no front matter\n", "no front matter"),
    ("---\nname: x\n", "no closing"),
    ("---\ndescription: d\n---\n", "no name"),
    ("---\nname: ok-name\n---\n", "no description"),
    ("---\nname: Bad Name\ndescription: d\n---\n", "is not lower-case"),
    ("---\nname: ok\nthis line is not yaml\n---\n", "is not 'key: value'"),
])
def test_a_malformed_skill_is_reported_once_and_skipped(tmp_path: Path, text: str, why: str) -> None:
    skill(tmp_path, "good", GOOD.replace("house-plots", "good"))
    bad = skill(tmp_path, "bad", text)
    skills = find_skills([tmp_path])
    assert [s.name for s in skills.found] == ["good"]
    assert len(skills.problems) == 1 and str(bad / "SKILL.md") in skills.problems[0] and why in skills.problems[0]


def test_the_first_of_a_name_wins(tmp_path: Path) -> None:
    skill(tmp_path / "a", "one", GOOD)
    skill(tmp_path / "b", "two", GOOD.replace("Plot", "Draw"))
    skills = find_skills([tmp_path / "a", tmp_path / "b", tmp_path / "missing"])
    assert [s.description for s in skills.found] == ["Plot in the house style."]
    assert "same name 'house-plots'" in skills.problems[0]


def test_a_folder_that_is_itself_a_skill(tmp_path: Path) -> None:
    folder = skill(tmp_path, "house-plots", GOOD)
    assert [s.name for s in find_skills([folder]).found] == ["house-plots"]


def test_yaml_forms_of_the_fields() -> None:
    fields, body = parse_front_matter(
        "\ufeff---\nname: 'quoted'\ndescription: >\n  folded over\n  two lines\nmetadata:\n  author: me\n"
        "# a comment\nlicense: \"MIT\"\n---\nbody\n")
    assert fields["name"] == "quoted" and fields["description"] == "folded over two lines"
    assert fields["license"] == "MIT" and body == "body"


names = st.from_regex(r"\A[a-z0-9]{1,10}(-[a-z0-9]{1,10}){0,3}\Z")
descriptions = st.text(string.ascii_letters + string.digits + " .,;()!?-", min_size=1, max_size=200).filter(
    lambda d: d.strip() == d and d[0] not in "'\"#>|-" and ": " not in d)


@given(names, descriptions)
def test_name_and_description_round_trip(name: str, description: str) -> None:
    fields, body = parse_front_matter(f"---\nname: {name}\ndescription: {description}\n---\n# Body\n")
    assert fields == {"name": name, "description": description} and body == "# Body"
