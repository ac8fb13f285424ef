"""Project instructions said once: ``AGENTS.md`` files (``CLAUDE.md``, ``GEMINI.md`` where there is none) from the
project root (``--root``, else found upwards from the notebook's folder: :func:`find_project_root`) down to the
notebook's folder, and the notebook's own markdown cells tagged ``agent-instructions``.

They are added to the system prompt under a heading naming where each came from, the nearest last (so it wins
where they disagree). They are redacted like everything the model is sent, and never elided by compaction (the
system prompt is not part of the history).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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


REPOSITORY_MARKER = ".git"
"""A repository's folder (``.git`` a folder, or a worktree's file): a project's outer edge."""
PROJECT_MARKERS = ("AGENTS.md", ".agents")
"""What marks a folder as a project's outside a repository: an ``AGENTS.md`` or an ``.agents/`` folder."""


def find_project_root(folder: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> Path:
    """The project root of a notebook in ``folder``: the nearest repository at or above it (a folder holding
    ``.git``); where there is none, the highest folder at or above it holding ``AGENTS.md`` or ``.agents/``; else
    ``folder`` itself. (Not simply the nearest marker: a subfolder's own ``AGENTS.md`` would hide the repository's.)

    The search never reaches the user's ``home`` (a dotfiles repository there does not make the whole home a
    project; ``home`` counts only when the notebook is in it) and stops at a folder another user owns or anyone
    may write to (``/tmp``: a file planted there by someone else is not this project's)."""
    start = Path(folder).resolve()
    top = Path(home if home is not None else Path.home()).resolve()
    marked = start
    for each in [start, *start.parents]:
        if each != start and (each == top or not _own(each)):
            break
        if os.path.lexists(each / REPOSITORY_MARKER):
            return each
        if any(os.path.lexists(each / marker) for marker in PROJECT_MARKERS):
            marked = each
    return marked


def _own(folder: Path) -> bool:
    """Whether ``folder`` is the current user's alone: they own it and others may not write to it (``/tmp`` is
    nobody's project). Always where there are no user ids."""
    if not hasattr(os, "getuid"):
        return True
    try:
        info = folder.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & stat.S_IWOTH


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


@dataclass
class Found:
    """The instruction files read, and one line for each left out (its path from the root, why; nothing of it)."""

    instructions: list[Instruction] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_instruction_files(root: str | os.PathLike[str], folder: str | os.PathLike[str]) -> Found:
    """The instruction file of each folder from ``root`` down to ``folder`` (the nearest last), read by the file
    tools' rules (:func:`~agentkernel.tools.files.checked_text`): a file whose real path is outside the root (a
    link to ``~/.aws/credentials``), a secret file, a FIFO, a file over 1 MB, or one that is not UTF-8 text is left
    out with one line naming it by its path from the root. A folder outside the root (the notebook's) is its own
    root, and its file is named ``AGENTS.md (the notebook's folder)``. A file over :data:`MAX_INSTRUCTION_CHARS` is
    cut, saying so."""
    from .tools.files import checked_text

    root_path = Path(root).resolve()
    found = Found()
    for each in folders_between(root_path, Path(folder)):
        inside = each.is_relative_to(root_path)
        base = root_path if inside else each
        for name in INSTRUCTION_FILES:
            path = each / name
            if not os.path.lexists(path):
                continue
            shown = (path.relative_to(root_path).as_posix() if inside
                     else f"{name} (the notebook's folder)")
            try:
                text = checked_text(path, base)
            except ValueError as e:
                found.problems.append(f"{shown} is left out of the project's instructions: {e}")
                break
            if len(text) > MAX_INSTRUCTION_CHARS:
                text = (text[:MAX_INSTRUCTION_CHARS] + f"\n[cut: the file has {len(text):,} characters; the first "
                        f"{MAX_INSTRUCTION_CHARS:,} are shown]")
            if text.lstrip("\ufeff").strip():
                found.instructions.append(Instruction(shown, text.lstrip("\ufeff").strip()))
            break
    return found


def instruction_files(root: str | os.PathLike[str], folder: str | os.PathLike[str]) -> list[Instruction]:
    """The instructions :func:`read_instruction_files` reads (without the lines about files left out)."""
    return read_instruction_files(root, folder).instructions


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
