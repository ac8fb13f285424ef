"""Tool sources: each one names the tools it offers and makes them (pydantic-ai's toolsets, kept small).

A run's ``--tools`` words are resolved in one pass (:func:`select`): each word goes to the first source that
claims it, and a word nobody claims is an :class:`~agentkernel.errors.AgentConfigError` that lists what each source
offers. The sources are the file tools (:class:`FileToolset`), a fixed list such as the kernel's or the notebook's
tools (:class:`StaticToolset`), the user's functions and ``@tool`` s by name (:class:`NamespaceToolset`) and MCP
servers (``agentkernel.jupyter.mcp_servers.MCPToolset``)::

    picked = select(["read_file", "word_count"], [NamespaceToolset(globals()), FileToolset(".")])
    tools = picked.tools()
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import AgentConfigError
from .base import Tool, tool


class Toolset(ABC):
    """A source of tools: which ``--tools`` words it answers to, and the tools those words name."""

    @abstractmethod
    def names(self) -> Sequence[str]:
        """The tool names it offers, as an unknown-tool message lists them (empty for an open-ended source)."""

    def claims(self, word: str) -> bool:
        """Whether ``word`` names one of its tools (or a group of them)."""
        return word in self.names()

    @abstractmethod
    def make(self, word: str) -> list[Tool]:
        """The tools ``word`` (one it claims) names; AgentConfigError if it cannot make them."""

    def offer(self) -> str:
        """How an unknown-tool message names what it offers."""
        return f"one of {', '.join(self.names())}"


@dataclass
class StaticToolset(Toolset):
    """Tools made already (the kernel's, the notebook's), and older names (``aliases``) for some of them."""

    label: str
    tools: Sequence[Tool]
    aliases: Mapping[str, str] = field(default_factory=dict)

    def names(self) -> Sequence[str]:
        return [t.name for t in self.tools]

    def claims(self, word: str) -> bool:
        return self.aliases.get(word, word) in self.names()

    def make(self, word: str) -> list[Tool]:
        name = self.aliases.get(word, word)
        return [t for t in self.tools if t.name == name]

    def offer(self) -> str:
        return f"{self.label} ({', '.join(self.names())})"


@dataclass
class FileToolset(Toolset):
    """``read_file``, ``list_dir`` and ``search_text`` under one root (see :func:`agentkernel.tools.files.file_tools`),
    made only when a word names one of them."""

    root: str | None = None
    allow_secret_files: bool = False
    _made: list[Tool] | None = field(default=None, init=False, repr=False)

    def names(self) -> Sequence[str]:
        from .files import FILE_TOOL_NAMES

        return FILE_TOOL_NAMES

    def make(self, word: str) -> list[Tool]:
        if self._made is None:  # all three share one path policy
            from .files import file_tools

            self._made = file_tools(self.root or None, allow_secret_files=self.allow_secret_files)
        return [t for t in self._made if t.name == word]

    def offer(self) -> str:
        return f"a file tool ({', '.join(self.names())})"


@dataclass
class NamespaceToolset(Toolset):
    """The user's functions and ``@tool`` s, by their name in ``namespace`` (a notebook's, a module's globals); a
    plain function is made a tool with :func:`~agentkernel.tools.tool`."""

    namespace: Mapping[str, Any]
    where: str = "in this notebook"

    def names(self) -> Sequence[str]:
        return [name for name, value in self.namespace.items() if isinstance(value, Tool)]

    def claims(self, word: str) -> bool:
        return word in self.namespace

    def make(self, word: str) -> list[Tool]:
        found = self.namespace[word]
        if not callable(found):
            raise AgentConfigError(f"tool {word!r} is a {type(found).__name__}, not a function or @tool")
        return [found if isinstance(found, Tool) else tool(found)]

    def offer(self) -> str:
        return f"the name of a function or @tool {self.where}"


@dataclass
class Selection:
    """The ``--tools`` words, each with the source that claimed it (see :func:`select`)."""

    picks: list[tuple[Toolset, str]] = field(default_factory=list)

    def tools(self) -> list[Tool]:
        """The tools, in the words' order, each once (a word naming a tool already there adds nothing)."""
        chosen: list[Tool] = []
        for source, word in self.picks:
            chosen += [t for t in source.make(word) if t not in chosen]
        return chosen


def select(words: Iterable[str], sources: Sequence[Toolset]) -> Selection:
    """Resolve ``--tools`` words in one pass: each goes to the first of ``sources`` that claims it."""
    picks = []
    for word in words:
        owner = next((source for source in sources if source.claims(word)), None)
        if owner is None:
            raise AgentConfigError(unknown_tool(word, sources))
        picks.append((owner, word))
    return Selection(picks)


def unknown_tool(word: str, sources: Sequence[Toolset]) -> str:
    """The one-line message for a word no source claims: what each source offers."""
    return f"unknown tool {word!r}: use {', '.join(source.offer() for source in sources)}"
