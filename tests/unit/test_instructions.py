"""Project instructions: which files are read, in which order, and how they are put to the model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkernel.instructions import (
    MAX_INSTRUCTION_CHARS,
    NOTEBOOK_SOURCE,
    Instruction,
    find_project_root,
    instruction_files,
    instructions_prompt,
    notebook_instructions,
    read_instruction_files,
)


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_root_down_to_the_folder_nearest_last(tmp_path: Path) -> None:
    tree(tmp_path, {"AGENTS.md": "use polars", "analysis/AGENTS.md": "plots in the house style",
                    "analysis/deep/CLAUDE.md": "never touch raw/", "other/AGENTS.md": "not on the way"})
    found = instruction_files(tmp_path, tmp_path / "analysis" / "deep")
    assert [i.source for i in found] == ["AGENTS.md", "analysis/AGENTS.md", "analysis/deep/CLAUDE.md"]
    assert [i.text for i in found] == ["use polars", "plots in the house style", "never touch raw/"]


def test_agents_md_wins_over_its_kin_in_one_folder(tmp_path: Path) -> None:
    tree(tmp_path, {"AGENTS.md": "a", "CLAUDE.md": "c", "GEMINI.md": "g", "sub/GEMINI.md": "g2", "sub/CLAUDE.md": "c2"})
    assert [i.source for i in instruction_files(tmp_path, tmp_path / "sub")] == ["AGENTS.md", "sub/CLAUDE.md"]


def test_a_folder_outside_the_root_comes_after_the_root(tmp_path: Path) -> None:
    tree(tmp_path, {"root/AGENTS.md": "root's", "root/sub/AGENTS.md": "not on the way", "elsewhere/AGENTS.md": "own"})
    found = instruction_files(tmp_path / "root", tmp_path / "elsewhere")
    assert [i.text for i in found] == ["root's", "own"]
    assert found[1].source == "AGENTS.md (the notebook's folder)"  # no absolute path, in the prompt or the headline


def test_unreadable_empty_and_huge_files(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(b"\xff\xfe not utf-8 \x80")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "AGENTS.md").write_text("   \n")
    (tmp_path / "sub" / "big").mkdir()
    (tmp_path / "sub" / "big" / "AGENTS.md").write_text("x" * (MAX_INSTRUCTION_CHARS + 10))
    found = instruction_files(tmp_path, tmp_path / "sub" / "big")
    assert [i.source for i in found] == ["sub/big/AGENTS.md"]
    assert found[0].text.endswith(f"the first {MAX_INSTRUCTION_CHARS:,} are shown]")


def test_tagged_markdown_cells() -> None:
    cells = [
        {"cell_type": "markdown", "source": ["Use ", "seaborn."], "metadata": {"tags": ["agent-instructions"]}},
        {"cell_type": "code", "source": "x = 1", "metadata": {"tags": ["agent-instructions"]}},
        {"cell_type": "markdown", "source": "not tagged", "metadata": {}},
        {"cell_type": "markdown", "source": "Answer in French.", "metadata": {"tags": ["a", "agent-instructions"]}},
        {"cell_type": "markdown", "source": "bad tags", "metadata": {"tags": "agent-instructions"}},
    ]
    found = notebook_instructions(cells)
    assert found == Instruction(NOTEBOOK_SOURCE, "Use seaborn.\n\nAnswer in French.")
    assert notebook_instructions([{"cell_type": "markdown", "source": "x", "metadata": {}}]) is None


def test_the_prompt_names_each_source_in_order() -> None:
    assert instructions_prompt([]) == ""
    text = instructions_prompt([Instruction("AGENTS.md", "one"), Instruction("analysis/AGENTS.md", "two")])
    assert text.index("## From AGENTS.md\n\none") < text.index("## From analysis/AGENTS.md\n\ntwo")
    assert "later one" in text


# -- the file rules: what a cloned repository may ship ---------------------------------------------------------------

SECRET = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def credentials(tmp_path: Path) -> Path:
    """A credentials file outside the project, where the AWS CLI keeps it."""
    path = tmp_path / "home" / ".aws" / "credentials"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[default]\n{SECRET}\n")
    return path


def links(tmp_path: Path, project: Path, shape: str) -> str:
    """Make ``project``'s instruction file lead to the credentials by one of the ways a repository can ship; the
    path (from the project root) of the file that leads out."""
    target = credentials(tmp_path)
    if shape == "direct":
        (project / "AGENTS.md").symlink_to(target)
        return "AGENTS.md"
    if shape == "chain":  # AGENTS.md -> docs/rules.md -> docs/more.md -> outside
        (project / "docs").mkdir()
        (project / "docs" / "more.md").symlink_to(target)
        (project / "docs" / "rules.md").symlink_to("more.md")
        (project / "AGENTS.md").symlink_to("docs/rules.md")
        return "AGENTS.md"
    if shape == "relative":  # analysis/CLAUDE.md -> ../../home/.aws/credentials
        (project / "analysis").mkdir(exist_ok=True)
        (project / "analysis" / "CLAUDE.md").symlink_to(os.path.relpath(target, project / "analysis"))
        return "analysis/CLAUDE.md"
    if shape == "folder":  # a subfolder that is a link out, holding the credentials as its instructions
        (target.parent / "AGENTS.md").symlink_to(target)
        (project / "analysis").symlink_to(target.parent, target_is_directory=True)
        return "AGENTS.md (the notebook's folder)"  # the notebook's real folder is outside: read as its own
    raise AssertionError(shape)


@pytest.mark.parametrize("shape", ["direct", "chain", "relative", "folder"])
def test_a_link_out_of_the_project_is_left_out_with_one_line(tmp_path: Path, shape: str) -> None:
    project = tmp_path / "repo"
    (project / "analysis").mkdir(parents=True) if shape != "folder" else project.mkdir()
    shown = links(tmp_path, project, shape)
    found = read_instruction_files(project, project / "analysis")
    said = "\n".join([*found.problems, *(i.source + i.text for i in found.instructions)])
    assert "wJalrXUtnFEMI" not in said and "aws_secret" not in said and str(tmp_path) not in said
    if shape == "folder":  # the notebook's own folder is the credentials' folder: the file rules still refuse it
        assert found.problems == [f"{shown} is left out of the project's instructions: it is a secret file, which "
                                  "the file tools do not read"]
    else:
        assert found.problems == [f"{shown} is left out of the project's instructions: its real path is outside the "
                                  "project root (a link that leads out)"]
    assert found.instructions == []


def test_a_link_to_a_secret_file_inside_the_project_is_left_out(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"KEY={SECRET}\n")
    (tmp_path / "AGENTS.md").symlink_to(".env")
    found = read_instruction_files(tmp_path, tmp_path)
    assert found.problems == ["AGENTS.md is left out of the project's instructions: it is a secret file, which the "
                              "file tools do not read"] and found.instructions == []


def test_odd_files_are_left_out_with_one_line_each_and_nothing_waits(tmp_path: Path) -> None:
    folders = ["", "fifo", "fifo/huge", "fifo/huge/latin", "fifo/huge/latin/utf16", "fifo/huge/latin/utf16/loop"]
    for folder in folders[1:]:
        (tmp_path / folder).mkdir()
    os.mkfifo(tmp_path / "fifo" / "AGENTS.md")  # opening it to read would wait for a writer for ever
    (tmp_path / folders[2] / "AGENTS.md").write_bytes(b"x" * 1_000_001)
    (tmp_path / folders[3] / "AGENTS.md").write_bytes("Benutze Polars, nicht Pandas. Größe".encode("latin-1"))
    (tmp_path / folders[4] / "AGENTS.md").write_text("use polars", encoding="utf-16")
    (tmp_path / folders[5] / "AGENTS.md").symlink_to("AGENTS.md")
    (tmp_path / "AGENTS.md").write_text("\ufeffuse polars\n")  # a byte-order mark is fine
    found = read_instruction_files(tmp_path, tmp_path / folders[-1])
    assert [i.text for i in found.instructions] == ["use polars"]
    why = [line.split(": ", 1)[1] for line in found.problems]
    assert [line.split(" ", 1)[0] for line in found.problems] == [f"{f}/AGENTS.md" for f in folders[1:]]
    assert why == ["it is not a regular file", "it is over the 1,000,000-byte limit", "it is not UTF-8 text (binary?)",
                   "it is a binary file, not text", "it cannot be followed (a broken link or a link loop)"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(min_size=1, max_size=300), shape=st.sampled_from(["direct", "chain", "relative"]))
def test_nothing_of_a_file_out_of_the_project_is_said_whatever_it_holds(tmp_path_factory: pytest.TempPathFactory,
                                                                         content: bytes, shape: str) -> None:
    tmp_path = tmp_path_factory.mktemp("attack")
    project = tmp_path / "repo"
    (project / "analysis").mkdir(parents=True)
    links(tmp_path, project, shape)
    (tmp_path / "home" / ".aws" / "credentials").write_bytes(content)
    found = read_instruction_files(project, project / "analysis")
    assert found.instructions == [] and len(found.problems) == 1
    line = found.problems[0]
    assert str(tmp_path) not in line and "credentials" not in line
    text = content.decode("utf-8", "replace").strip()
    if len(text) >= 4:
        assert text not in line


# -- the project root, found upwards ---------------------------------------------------------------------------------

@pytest.mark.parametrize("marker", [".git", "AGENTS.md", ".agents"])
def test_a_marked_folder_above_is_the_root(tmp_path: Path, marker: str) -> None:
    deep = tmp_path / "home" / "repo" / "analysis" / "deep"
    deep.mkdir(parents=True)
    (tmp_path / "home" / "repo" / marker).mkdir() if marker != "AGENTS.md" else None
    if marker == "AGENTS.md":
        (tmp_path / "home" / "repo" / marker).write_text("x")
    assert find_project_root(deep, home=tmp_path / "home") == tmp_path / "home" / "repo"


def test_the_nearest_repository_wins_and_a_subfolders_agents_md_does_not_hide_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    deep = home / "work" / "repo" / "analysis" / "deep"
    deep.mkdir(parents=True)
    (home / "work" / "AGENTS.md").write_text("outside the repository")
    (home / "work" / "repo" / ".git").mkdir()
    (home / "work" / "repo" / "analysis" / "AGENTS.md").write_text("the subfolder's")
    (deep / ".agents").mkdir()
    assert find_project_root(deep, home=home) == home / "work" / "repo"
    (home / "work" / "repo" / "analysis" / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git file
    assert find_project_root(deep, home=home) == home / "work" / "repo" / "analysis"
    # no repository: the highest marked folder, so the outer AGENTS.md is read too
    (home / "work" / "repo" / ".git").rmdir()
    (home / "work" / "repo" / "analysis" / ".git").unlink()
    assert find_project_root(deep, home=home) == home / "work"
    assert find_project_root(home / "work" / "repo", home=home) == home / "work"
    assert find_project_root(tmp_path / "home", home=home) == home


def test_the_search_never_reaches_home_nor_goes_above_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "notes" / "week1").mkdir(parents=True)
    (home / ".git").mkdir()  # a dotfiles repository in the home folder
    (tmp_path / "AGENTS.md").write_text("above home")
    assert find_project_root(home / "notes" / "week1", home=home) == home / "notes" / "week1"
    assert find_project_root(home, home=home) == home  # a notebook in the home folder itself


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a folder away needs root")
def test_the_search_stops_at_a_folder_another_user_owns(tmp_path: Path) -> None:
    shared = tmp_path / "shared"  # /tmp, say: anyone could have put an AGENTS.md there
    (shared / "mine").mkdir(parents=True)
    (shared / "AGENTS.md").write_text("planted")
    os.chown(shared, 65534, 65534)
    assert find_project_root(shared / "mine", home=tmp_path / "home") == shared / "mine"


def test_the_search_stops_at_a_folder_anyone_may_write_to(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"  # as /tmp: anyone could have put an AGENTS.md or a .git there
    (shared / "mine").mkdir(parents=True)
    (shared / ".git").mkdir()
    shared.chmod(0o1777)
    assert find_project_root(shared / "mine", home=tmp_path / "home") == shared / "mine"
    shared.chmod(0o755)
    assert find_project_root(shared / "mine", home=tmp_path / "home") == shared
