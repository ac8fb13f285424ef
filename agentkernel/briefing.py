"""What a run is told before its first turn: the system prompt (the one given, else :data:`DEFAULT_SYSTEM_PROMPT`,
then the project's instructions and the skills' names, redacted, never compacted away) and the tools it gets
(``load_skill`` with any skill: a skill's body reaches the model only through it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .instructions import Instruction, instructions_prompt
from .record.context import CONTEXT_FRAME
from .secrets import KERNEL, SECRETS_FRAME
from .skills import Skill, Skills, load_skill_tool, skills_prompt
from .tools import Tool

DEFAULT_SYSTEM_PROMPT = """\
You are an assistant working inside a bounded tool-use loop in a Jupyter notebook.
Each tool call costs time and budget, and the loop stops if you repeat a call that already gave you its answer.
Choose few, well-aimed calls; read what a tool returns before calling again; answer as soon as you can.
If you cannot finish, say what you found so far and what you would still need."""


@dataclass
class Briefing:
    """A run's system prompt as given (:attr:`system`), where its parts came from, and its tools."""

    system: str
    instructions: list[Instruction]
    skills: list[Skill]
    tools: list[Tool | Callable[..., Any]]

    @classmethod
    def of(cls, system: str | None, instructions: Iterable[Instruction], skills: Skills | None,
           tools: Iterable[Tool | Callable[..., Any]]) -> Briefing:
        """The briefing of a run: the instructions and the skills' descriptions redacted by the kernel's secret set as
        it is now."""
        secrets = KERNEL.refresh()
        told = [Instruction(i.source, secrets.redact(i.text)) for i in instructions]
        offered = [Skill(s.name, secrets.redact(s.description), s.folder, s.body)
                   for s in (skills.found if skills else [])]
        tools = [*tools, load_skill_tool(skills)] if offered and skills is not None else list(tools)
        text = "\n\n".join(part for part in (DEFAULT_SYSTEM_PROMPT if system is None else system,
                                             instructions_prompt(told), skills_prompt(offered)) if part)
        return cls(text, told, offered, tools)

    def as_sent(self, *, compacted: bool, shows_secrets: bool) -> str:
        """The system prompt as a request sends it: once the view has been compacted it tells the model how
        (``CONTEXT_FRAME``), and once the history shows the model a secret's marker what one is (``SECRETS_FRAME``);
        before either, exactly as given (so a server's cache of it, and a recorded cassette, stay as they were)."""
        if not (compacted or shows_secrets):
            return self.system
        frames = [CONTEXT_FRAME] * compacted + [SECRETS_FRAME] * shows_secrets
        return "\n\n".join([self.system, *frames] if self.system else frames)

    def sources(self) -> dict[str, list[str]]:
        """Where the run's instructions came from and which skills it was offered (for the result and transcript)."""
        return {"instructions": [i.source for i in self.instructions], "skills": [s.name for s in self.skills]}
