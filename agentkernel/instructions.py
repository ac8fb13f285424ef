"""Project instructions said once: ``AGENTS.md`` files (``CLAUDE.md``, ``GEMINI.md`` where there is none) from the
project root down to the notebook's folder, and the notebook's own markdown cells tagged ``agent-instructions``.

They are added to the system prompt under a heading naming where each came from, the nearest last (so it wins
where they disagree). They are redacted like everything the model is sent, and never elided by compaction (the
system prompt is not part of the history).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md", "GEMINI.md")
"""The file names read in each folder, in order of preference: the first one present is the folder's."""
CELL_TAG = "agent-instructions"
"""The tag (cell metadata ``tags``, as nbformat has them) of a markdown cell that holds instructions."""
NOTEBOOK_SOURCE = "the notebook's cells tagged agent-instructions"
MAX_INSTRUCTION_CHARS = 32_000
"""Of one file: past this the rest is left out, and the model is told so."""


@dataclass(frozen=True)
class Instruction:
    """One source of instructions: where it came from (a path relative to the root, or the notebook) and its text."""

    source: str
    text: str


def folders_between(root: Path, folder: Path) -> list[Path]:
    """``root`` and each folder below it down to ``folder``, root first; ``root`` then ``folder`` when ``folder`` is
    not inside ``root`` (the project's instructions, then the notebook's)."""
    root, folder = root.resolve(), folder.resolve()
    if not folder.is_relative_to(root):
        return [root, folder]
    chain = [root]
    for part in folder.relative_to(root).parts:
        chain.append(chain[-1] / part)
    return chain


def instruction_files(root: str | os.PathLike[str], folder: str | os.PathLike[str]) -> list[Instruction]:
    """The instruction file of each folder from ``root`` down to ``folder`` (the nearest last).

    A file that cannot be read as UTF-8 text is left out; one over :data:`MAX_INSTRUCTION_CHARS` is cut, saying so.
    """
    root_path = Path(root).resolve()
    found = []
    for each in folders_between(root_path, Path(folder)):
        for name in INSTRUCTION_FILES:
            path = each / name
            if not path.is_file():
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeError):
                continue
            if len(text) > MAX_INSTRUCTION_CHARS:
                text = (text[:MAX_INSTRUCTION_CHARS] + f"\n[cut: the file has {len(text):,} characters; the first "
                        f"{MAX_INSTRUCTION_CHARS:,} are shown]")
            shown = path.relative_to(root_path) if path.is_relative_to(root_path) else path
            found.append(Instruction(shown.as_posix(), text.strip()))
            break
    return [each for each in found if each.text]


def notebook_instructions(cells: Iterable[Mapping[str, Any]]) -> Instruction | None:
    """The markdown cells tagged :data:`CELL_TAG`, as one source; None when there are none. A cell is an nbformat
    dict (its tags in ``metadata.tags``) or a dict with ``cell_type``, ``source`` and ``tags``."""
    texts = []
    for cell in cells:
        tags = cell.get("tags") or (cell.get("metadata") or {}).get("tags") or []
        if cell.get("cell_type") == "markdown" and isinstance(tags, list) and CELL_TAG in tags:
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else str(source)
            texts.append(text.strip())
    texts = [text for text in texts if text]
    return Instruction(NOTEBOOK_SOURCE, "\n\n".join(texts)) if texts else None


def instructions_prompt(instructions: Iterable[Instruction]) -> str:
    """The system prompt's section for ``instructions`` ("" when there are none)."""
    instructions = list(instructions)
    if not instructions:
        return ""
    parts = ["# Project instructions",
             "The user's instructions for this project, from the files named below. Follow them. Where they "
             "disagree, the later one (nearer the notebook) wins."]
    parts += [f"## From {each.source}\n\n{each.text}" for each in instructions]
    return "\n\n".join(parts)
