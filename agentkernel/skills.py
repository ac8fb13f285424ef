"""Agent Skills, loaded when needed: folders with a ``SKILL.md`` whose front matter gives a ``name`` and a
``description`` (the open Agent Skills format).

The model is told each skill's name and description only (:func:`skills_prompt`); the read-only ``load_skill``
tool (:func:`load_skill_tool`) returns a skill's body, and the skill's other files by their path inside its folder.
A malformed ``SKILL.md`` is reported (:attr:`Skills.problems`) and skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .tools.base import Tool, ToolError, tool

SKILL_FILE = "SKILL.md"
PROJECT_SKILLS = Path(".agents") / "skills"
"""Under the project root."""
USER_SKILLS = Path("~") / ".agentkernel" / "skills"
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_NAME, MAX_DESCRIPTION = 64, 1024
MAX_LISTED_FILES = 50


@dataclass(frozen=True)
class Skill:
    """One skill: its name and description (what the model is told), its folder, and its body (what it loads)."""

    name: str
    description: str
    folder: Path
    body: str

    def files(self) -> list[str]:
        """The skill's other files, by their path inside its folder (at most :data:`MAX_LISTED_FILES`)."""
        found = []
        for dirpath, dirnames, filenames in os.walk(self.folder):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                path = Path(dirpath, name).relative_to(self.folder).as_posix()
                if path != SKILL_FILE and not name.startswith("."):
                    found.append(path)
        return found[:MAX_LISTED_FILES]


@dataclass
class Skills:
    """The skills found, and one line for each ``SKILL.md`` that could not be used."""

    found: list[Skill] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> Skill:
        for skill in self.found:
            if skill.name == name:
                return skill
        raise KeyError(name)


def parse_front_matter(text: str) -> tuple[dict[str, str], str]:
    """The ``---``-fenced front matter of a Markdown file as flat ``key: value`` strings, and the body after it.

    Enough YAML for the format's fields: plain, quoted and folded (``>``/``|`` or indented continuation) scalars;
    nested mappings (``metadata:``) are skipped. Raise ValueError saying what is wrong.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise ValueError("it has no front matter (a first line '---', then 'name: ...' and 'description: ...')")
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        raise ValueError("its front matter has no closing '---' line") from None
    fields: dict[str, str] = {}
    key = None
    for number, line in enumerate(lines[1:end], 2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[:1] in (" ", "\t"):
            if key is not None:  # a continuation of the previous key's value
                fields[key] = (fields[key] + " " + line.strip()).strip()
            continue
        match = re.match(r"^([A-Za-z0-9_-]+)\s*:\s*(.*)$", line)
        if not match:
            raise ValueError(f"its front matter line {number} is not 'key: value'")
        key, value = match.group(1), match.group(2).strip()
        if value in (">", "|", ">-", "|-"):
            value = ""
        elif len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        fields[key] = value
    return fields, "\n".join(lines[end + 1:]).strip()


def read_skill(path: Path, base: Path | None = None) -> Skill:
    """The skill whose ``SKILL.md`` is ``path``, read by the file tools' rules (its real path under ``base`` when one
    is given: :func:`~agentkernel.tools.files.checked_text`); raise ValueError saying what is wrong with it, quoting
    nothing of the file but its name."""
    from .tools.files import checked_text

    fields, body = parse_front_matter(checked_text(path, base))
    name, description = fields.get("name", "").strip(), fields.get("description", "").strip()
    if not name:
        raise ValueError("its front matter has no name")
    if not description:
        raise ValueError("its front matter has no description")
    if len(name) > MAX_NAME or not NAME.match(name):
        raise ValueError(f"its name {name[:80]!r} is not lower-case letters, digits and single hyphens "
                         f"(at most {MAX_NAME} characters)")
    return Skill(name, description[:MAX_DESCRIPTION], path.parent, body)


def skill_folders(root: str | os.PathLike[str], extra: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
    """Where skills are looked for, in order: ``.agents/skills`` under ``root``, ``~/.agentkernel/skills``, then the
    ``extra`` folders (``%config AgentMagics.skill_paths``)."""
    return [Path(root) / PROJECT_SKILLS, USER_SKILLS.expanduser(), *(Path(p).expanduser() for p in extra)]


def shown_path(path: Path, project: Path | None) -> str:
    """``path`` as a line names it: from the project root when it is under it (as given, links not followed), else
    from ``~`` when under the home folder, else as it is."""
    if project is not None and path.is_relative_to(project):
        return path.relative_to(project).as_posix()
    home = Path.home()
    return "~/" + path.relative_to(home).as_posix() if path.is_relative_to(home) else path.as_posix()


def find_skills(folders: Iterable[Path], project: str | os.PathLike[str] | None = None) -> Skills:
    """The skills in ``folders``: each folder is a skill (it holds a ``SKILL.md``) or holds skill folders. The first
    skill of a name wins; a later one of the same name is reported.

    Every ``SKILL.md`` is read by the file tools' rules (a secret file, a FIFO, a huge or non-UTF-8 file is reported
    and skipped); under ``project`` (the project root) its real path must also stay under it, so a cloned
    repository's ``.agents`` linked to ``/etc``, or a skill linked out, is reported and skipped. Reports name files
    by their path from the project root (or from ``~``), never quoting them."""
    root = Path(project).absolute() if project is not None else None
    skills = Skills()
    for folder in folders:
        folder = folder.absolute()
        base = root if root is not None and folder.is_relative_to(root) else None
        if os.path.lexists(folder / SKILL_FILE):
            candidates = [folder / SKILL_FILE]
        elif folder.is_dir():
            if base is not None and not folder.resolve().is_relative_to(base.resolve()):
                skills.problems.append(f"skills in {shown_path(folder, root)} are skipped: its real path is outside "
                                       "the project root (a link that leads out)")
                continue
            candidates = sorted(p for p in folder.glob(f"*/{SKILL_FILE}") if os.path.lexists(p))
        else:
            continue
        for path in candidates:
            try:
                skill = read_skill(path, base)
            except ValueError as e:
                skills.problems.append(f"skill {shown_path(path, root)} is skipped: {e}")
                continue
            try:
                first = skills[skill.name]
            except KeyError:
                skills.found.append(skill)
            else:
                skills.problems.append(f"skill {shown_path(path, root)} is skipped: "
                                       f"{shown_path(first.folder / SKILL_FILE, root)} has the same name "
                                       f"{skill.name!r}")
    return skills


def skills_prompt(skills: Iterable[Skill]) -> str:
    """The system prompt's section that names the skills ("" when there are none)."""
    listed = [f"- {skill.name}: {skill.description}" for skill in skills]
    if not listed:
        return ""
    return "\n".join(["# Skills",
                      "Instructions for particular tasks, loaded when needed: before doing a task one of these "
                      "describes, call load_skill with its name and follow what it says.", *listed])


def load_skill_tool(skills: Skills) -> Tool:
    """The read-only ``load_skill(name, file)`` tool over ``skills``."""
    from .tools.files import PathPolicy

    names = ", ".join(skill.name for skill in skills.found)

    def load_skill(name: str, file: str = "") -> str:
        """Load a skill's instructions (its SKILL.md), or with file, another of the skill's files.

        Args:
            name: The skill's name, as listed in the system prompt.
            file: A path inside the skill's folder, e.g. "scripts/plot.py" (default: the skill's instructions).
        """
        try:
            skill = skills[name]
        except KeyError:
            raise ToolError(f"there is no skill {name!r}; the skills are: {names or 'none'}") from None
        if file:
            try:
                return PathPolicy(skill.folder).read_file(file)
            except (OSError, ValueError) as e:
                raise ToolError(f"skill {name}: {e}") from None
        others = skill.files()
        listed = (f"\n\n[the skill's other files, readable with load_skill({name!r}, file=...): "
                  f"{', '.join(others)}]") if others else ""
        return skill.body + listed

    return tool(load_skill, anytime=True)
