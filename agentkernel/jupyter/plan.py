"""A cell's options made a run's plan: its budgets, guards, tool sources and who approves its calls, with no IPython
in it (the magic hands it the notebook's namespace and the kernel's tools).

``%%agent`` builds an :class:`~agentkernel.loop.AgentLoop` from a :class:`RunPlan`; ``%agent_serve`` builds a served
session from one. Both get their tools (:meth:`RunPlan.tools`), approvals (:meth:`RunPlan.approver`) and runner the
same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import AgentConfigError
from ..guards import GuardConfig
from ..instructions import Instruction, find_project_root, read_instruction_files
from ..pricing import Pricer, parse_price
from ..skills import Skills, find_skills, skill_folders
from ..stop import StopSignal
from ..tools import Approver, Tool, ToolCall, Verdict
from ..tools.toolsets import FileToolset, NamespaceToolset, Selection, StaticToolset, Toolset, select
from ..usage import Limits
from .approvals import nobody_approver, terminal_approver
from .mcp_servers import KernelServers, MCPToolset
from .options import check
from .policy import Policy

if TYPE_CHECKING:
    from .kernel.notebook_tools import NotebookTools
    from .kernel.tools import KernelTools
    from .options import AgentOptions

TOOL_ALIASES = {"notebook_cells": "read_notebook"}
"""Built-in names kept for notebooks that use them: the tool they name now."""


class Asker(Protocol):
    """Where a person answers an approval (the panel): ``approve`` returns the verdict."""

    stop_signal: StopSignal

    async def approve(self, call: ToolCall, tool: Tool, timeout: float | None,
                      change: tuple[str, str] | None = None) -> Verdict: ...


@dataclass
class RunTools:
    """A run's tool sources, made for it: the kernel's and the notebook's tools (kept for what they record), the
    MCP servers, and the ``--tools`` words resolved against all of them."""

    kernel: KernelTools
    notebook: NotebookTools
    mcp: MCPToolset
    selection: Selection

    async def start(self) -> None:
        """Start the MCP servers the run needs (on the kernel's event loop)."""
        await self.mcp.start()

    def tools(self) -> list[Tool]:
        """The run's tools: those ``--tools`` names, then every tool of the ``--mcp`` servers, each once."""
        tools = self.selection.tools()
        resources = self.mcp.resource_tool()
        return tools + [t for t in self.mcp.always_tools() if t not in tools] + ([resources] if resources else [])


@dataclass
class RunPlan:
    """What a cell's options ask of a run, checked: raise AgentConfigError for a value that cannot work."""

    options: AgentOptions
    limits: Limits
    guards: GuardConfig
    price: Pricer | None
    problems: list[str] = field(default_factory=list)
    """One line for each instruction file or skill left out (:meth:`instructions`, :meth:`skills`), to print once."""
    policy: Policy = field(default_factory=Policy)
    """The admin's policy the options were held to (:mod:`agentkernel.jupyter.policy`)."""

    @classmethod
    def of(cls, options: AgentOptions) -> RunPlan:
        check(options)
        policy = Policy.load()
        options = policy.apply(options)
        if options.out is not None and not options.out.isidentifier():
            raise AgentConfigError(f"--out needs a variable name, not {options.out!r}")
        if options.text_repeats == 1:
            raise AgentConfigError("--text-repeats needs 0 (off) or at least 2: a chunk seen once is no repeat")
        limits = Limits(
            max_iterations=options.max_iterations or None,
            max_tokens=options.max_tokens or None,
            max_seconds=options.max_seconds or None,
            max_tool_calls=options.max_tool_calls or None,
            max_cost=options.max_cost or None,
        )
        guards = GuardConfig(
            repeat_limit=options.repeat_limit,
            stuck_window=options.stuck_window,
            max_stale_turns=options.stale_turns,
            max_consecutive_failures=options.failure_rounds,
            text_repeats=options.text_repeats,
        )
        return cls(options, limits, guards, parse_price(options.price) if options.price else None,
                   policy=policy)

    def tools(self, namespace: Mapping[str, Any], kernel: KernelTools, notebook: NotebookTools,
              servers: KernelServers, *, model_images: bool = False) -> RunTools:
        """Resolve ``--tools`` in one pass over the sources, in this order: the notebook's functions and ``@tool`` s
        (``namespace``), the file tools under ``--root``, the kernel's and the notebook's tools, the MCP servers of
        the configuration (``servers``: the kernel's). The MCP servers start later (:meth:`RunTools.start`)."""
        o = self.options
        mcp = MCPToolset(servers, o.mcp_config, o.mcp, model_images=model_images, prompt=o.mcp_prompt)
        sources: list[Toolset] = [
            NamespaceToolset(namespace),
            FileToolset(o.root or None, o.allow_secret_files),
            StaticToolset("a kernel tool", kernel.tools),
            StaticToolset("a notebook tool", notebook.tools, TOOL_ALIASES),
            mcp,
        ]
        selection = select(o.tools, sources)
        for source, word in selection.picks:
            if source is not mcp:
                self.policy.check_tool(word)
        for server in mcp.wanted:
            self.policy.check_server(server)
        return RunTools(kernel, notebook, mcp, selection)

    def project_root(self, folder: str) -> Path:
        """The project root of a notebook in ``folder``: ``--root``, else found upwards from ``folder``
        (:func:`~agentkernel.instructions.find_project_root`). The file tools' root is ``--root``, else the
        notebook's folder (the working directory), not the found root."""
        return Path(self.options.root).expanduser().resolve() if self.options.root else find_project_root(folder)

    def instructions(self, folder: str, cells: Instruction | None = None) -> list[Instruction]:
        """The project's instructions for a notebook in ``folder``: the files from the project root down to it,
        then the notebook's tagged cells (``cells``); none with ``--no-instructions``. A file left out by the file
        rules adds its line to :attr:`problems`."""
        if not self.options.instructions:
            return []
        found = read_instruction_files(self.project_root(folder), folder)
        self.problems += found.problems
        return found.instructions + ([cells] if cells else [])

    def skills(self, folder: str) -> Skills:
        """The skills under the project root, in ``~/.agentkernel/skills`` and in ``skill_paths``; a skill left out
        adds its line to :attr:`problems`."""
        root = self.project_root(folder)
        skills = find_skills(skill_folders(root, self.options.skill_paths), project=root)
        self.problems += skills.problems
        return skills

    def approver(self, panel: Asker, *, nobody: str | None, terminal: bool = False,
                 notebook: NotebookTools | None = None, untrusted: dict[str, str] | None = None) -> Approver:
        """Who approves a side-effecting call: nobody needed (``--allow-writes``), nobody at all (denied at once,
        saying ``nobody``: why no one can answer), the terminal, or the panel. ``untrusted``: the tools of MCP servers
        whose annotations are not trusted, by their server's name. A notebook edit that will be refused anyway is not
        asked about."""
        if self.options.allow_writes:
            return lambda call, tool: True
        elsewhere = nobody_approver(nobody, untrusted or {}) if nobody else terminal_approver(panel.stop_signal) \
            if terminal else None
        timeout = self.options.approval_timeout or None

        async def ask(call: ToolCall, tool: Tool) -> Verdict:
            if notebook is not None and not await notebook.asks(call):
                return True  # an edit that will be refused writes nothing: the tool says why, no one is asked
            if elsewhere is not None:  # the terminal's question, or the denial of a run nobody watches
                return elsewhere(call, tool)
            return await panel.approve(call, tool, timeout, change=notebook.preview(call) if notebook else None)

        return ask
