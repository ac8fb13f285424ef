"""Agent Skills: finding them, reporting the malformed ones, and load_skill."""

from __future__ import annotations

import asyncio
import os
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
    ("---\nname: ok\nthis line is not yaml\n---\n", "its front matter line 3 is not 'key: value'"),
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


# -- the file rules: a cloned repository's links ---------------------------------------------------------------------

def outside(tmp_path: Path) -> Path:
    """A folder outside the project holding a skill whose SKILL.md quotes a secret in its front matter."""
    folder = tmp_path / "etc" / "stolen"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text("---\nroot:x:0:0:root:/root:/bin/bash\n---\n")
    return folder


def test_links_out_of_the_project_are_skipped_with_one_line_naming_no_absolute_path(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    skills_folder = project / ".agents" / "skills"
    skill(skills_folder, "good", GOOD.replace("house-plots", "good"))
    (skills_folder / "linked").symlink_to(outside(tmp_path), target_is_directory=True)  # a skill folder leading out
    (skills_folder / "file").mkdir()
    (skills_folder / "file" / "SKILL.md").symlink_to(outside(tmp_path).parent / "stolen" / "SKILL.md")
    (skills_folder / "env").mkdir()
    (project / ".env").write_text("KEY=sk-proj-abcdefghijklmnop\n")
    (skills_folder / "env" / "SKILL.md").symlink_to("../../../.env")
    found = find_skills(skill_folders(project)[:1], project=project)
    assert [s.name for s in found.found] == ["good"]
    assert found.problems == [
        "skill .agents/skills/env/SKILL.md is skipped: it is a secret file, which the file tools do not read",
        "skill .agents/skills/file/SKILL.md is skipped: its real path is outside the project root (a link that "
        "leads out)",
        "skill .agents/skills/linked/SKILL.md is skipped: its real path is outside the project root (a link that "
        "leads out)"]
    said = "\n".join(found.problems)
    assert "root:x" not in said and "sk-proj" not in said and str(tmp_path) not in said


def test_an_agents_folder_linked_out_is_skipped_whole(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    etc = outside(tmp_path).parent  # .agents -> /etc, whose skills/ would be read
    (etc / "skills").symlink_to(etc, target_is_directory=True)
    (project / ".agents").symlink_to(etc, target_is_directory=True)
    found = find_skills(skill_folders(project)[:1], project=project)
    assert found.found == [] and found.problems == [
        "skills in .agents/skills are skipped: its real path is outside the project root (a link that leads out)"]


def test_a_fifo_a_huge_and_a_non_utf8_skill_are_skipped_and_nothing_waits(tmp_path: Path) -> None:
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "SKILL.md")
    skill(tmp_path, "huge", GOOD + "x" * 1_000_001)
    (tmp_path / "latin").mkdir()
    (tmp_path / "latin" / "SKILL.md").write_bytes(GOOD.replace("style", "Stil ß").encode("latin-1"))
    found = find_skills([tmp_path], project=tmp_path)
    assert found.found == [] and [line.split(": ", 1)[1] for line in found.problems] == [
        "it is not a regular file", "it is over the 1,000,000-byte limit", "it is not UTF-8 text (binary?)"]
