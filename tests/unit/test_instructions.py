"""Project instructions: which files are read, in which order, and how they are put to the model."""

from __future__ import annotations

from pathlib import Path

from agentkernel.instructions import (
    MAX_INSTRUCTION_CHARS,
    NOTEBOOK_SOURCE,
    Instruction,
    instruction_files,
    instructions_prompt,
    notebook_instructions,
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
    assert found[1].source == str(tmp_path / "elsewhere" / "AGENTS.md")


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
