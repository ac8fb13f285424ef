"""A cell's options made a run's plan: its budgets, guards, tool sources and who approves its calls, with no IPython
in it (the magic hands it the notebook's namespace and the kernel's tools).

``%%agent`` builds an :class:`~agentkernel.loop.AgentLoop` from a :class:`RunPlan`; ``%agent_serve`` builds a served
session from one. Both get their tools (:meth:`RunPlan.tools`), approvals (:meth:`RunPlan.approver`) and runner the
same way. The plan also resolves the run's model (:meth:`RunPlan.model`: a notebook object, a provider's model, a
cassette), the history ``--continue`` goes on from, and the keys the kernel's secret set must hold.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import AgentConfigError
from ..guards import GuardConfig
from ..instructions import Instruction, find_project_root, read_instruction_files
from ..models.base import Model
from ..models.providers import resolve, split_model
from ..pricing import Pricer, parse_price
from ..skills import Skills, find_skills, skill_folders
from ..stop import StopSignal
from ..tools import Approver, Decision, Tool, ToolCall, Verdict
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
DEFAULT_OPENAI_MODEL = "gpt-4.1-mini"
NO_MODEL = (
    "No model is configured: set OPENAI_API_KEY (and optionally AGENTKERNEL_MODEL or "
    "%config AgentMagics.model = '...'), point --base-url at an OpenAI-compatible server, "
    "or pass --model NAME where NAME is a model object in this notebook, e.g. "
    "my_model = agentkernel.ScriptedModel(['Hello!'])."
)


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

    def model(self, namespace: Mapping[str, Any]) -> Model:
        """The run's model: ``--replay``'s cassette, else the model named (an object in ``namespace``, else a
        provider's), wrapped to be recorded with ``--record``."""
        options = self.options
        if options.replay:
            from ..models.cassette import ReplayModel

            model: Model = cassette_file("--replay", options.replay, ReplayModel)
        else:
            model = named_model(options, namespace, self.policy)
        if options.record:
            from ..models.cassette import RecordingModel

            writable("--record", options.record)
            model = RecordingModel(model, options.record)
        if (rule := self.policy.ceiling("max_cost")) is not None and not options.replay:
            from ..pricing import PRICE_FORMAT, price_for

            if price_for(model, self.price) is None:
                raise self.policy.refused("max_cost", rule, f"a run of the model {model.name!r}, whose price is not "
                                          f"known, so its cost cannot be held (give --price {PRICE_FORMAT})")
        return model

    def keys(self, model: Model | None) -> dict[str, str]:
        """The keys of the run's model and of the configured MCP entries, by name (for the kernel's secret set)."""
        from ..models.cassette import model_secrets

        keys = {f"MODEL_KEY{'_' * bool(i)}{i or ''}": key
                for i, key in enumerate(model_secrets(getattr(model, "inner", model)) if model else [])}
        # Only when there is a configuration (.mcp.json is mcp.config's CONFIG_FILE): reading one loads pydantic.
        if self.options.mcp_config or os.path.isfile(".mcp.json"):
            from ..mcp.config import load_config

            try:
                keys.update(load_config(self.options.mcp_config or None).secrets())
            except AgentConfigError:  # a broken configuration: --mcp reports it when it is used
                pass
        return keys

    def history(self, namespace: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The history ``--continue`` goes on from (that of ``_agent``, or of a transcript file, repaired), or None
        without ``--continue``."""
        from ..result import LoopResult

        if self.options.resume is None:
            return None
        if self.options.resume:
            return transcript_history(self.options.resume)
        previous = namespace.get("_agent")
        if not isinstance(previous, LoopResult):
            raise AgentConfigError("--continue needs a previous run: run a %%agent cell first (its result is _agent)")
        return previous.history

    def transcript_folder(self) -> str | bool:
        """What ``AgentLoop(transcript=...)`` takes for the ``transcripts`` setting: True for the default folder,
        False for none (``""``), else the folder, made now (AgentConfigError when it cannot be)."""
        setting = self.options.transcripts
        if setting is None or not setting:
            return setting is None
        folder = os.path.abspath(os.path.expanduser(setting))  # where it was made, whatever the kernel does later
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise AgentConfigError(f"transcripts: cannot make the folder {setting!r} ({e.strerror or e}); "
                                   "%config AgentMagics.transcripts = '' writes none") from None
        return folder

    def tools(self, namespace: Mapping[str, Any], kernel: KernelTools, notebook: NotebookTools,
              servers: KernelServers, *, model_images: bool = False) -> RunTools:
        """Resolve ``--tools`` in one pass over the sources, in this order: the notebook's functions and ``@tool`` s
        (``namespace``), the file tools under ``--root``, the kernel's and the notebook's tools, the MCP servers of
        the configuration (``servers``: the kernel's). The MCP servers start later (:meth:`RunTools.start`)."""
        o = self.options
        kernel.journals.budget = int(o.undo_budget * 2**20)
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
            return lambda call, tool: Decision(True, reason="--allow-writes", by="policy")
        elsewhere = nobody_approver(nobody, untrusted or {}) if nobody else terminal_approver(panel.stop_signal) \
            if terminal else None
        timeout = self.options.approval_timeout or None

        async def ask(call: ToolCall, tool: Tool) -> Verdict:
            if notebook is not None and not await notebook.asks(call):
                # an edit that will be refused writes nothing: the tool says why, no one is asked
                return Decision(True, reason="the edit will be refused, so nothing is written", by="policy")
            if elsewhere is not None:  # the terminal's question, or the denial of a run nobody watches
                return elsewhere(call, tool)
            return await panel.approve(call, tool, timeout, change=notebook.preview(call) if notebook else None)

        return ask


def named_model(options: AgentOptions, namespace: Mapping[str, Any], policy: Policy | None = None) -> Model:
    """The model ``--model`` names: an object in the notebook (``namespace``), else a provider's model by name, which
    ``policy``'s ``models`` must allow (a notebook's own model object is its code, which no policy governs)."""
    name = options.model
    found = namespace.get(name) if name else None
    if found is not None:
        if not callable(getattr(found, "stream", None)):
            raise AgentConfigError(f"{name!r} in the notebook is a {type(found).__name__}, not a model "
                                   "(it needs a stream(request) method, like agentkernel.ScriptedModel)")
        return found  # type: ignore[no-any-return]
    if policy is not None:
        policy.check_model(name or DEFAULT_OPENAI_MODEL)
    try:
        resolved = resolve(name or DEFAULT_OPENAI_MODEL, api=options.api, base_url=provider_base_url(name, options))
    except ValueError as e:
        raise AgentConfigError(str(e)) from None
    if options.api_key_env and not os.environ.get(options.api_key_env):
        raise AgentConfigError(f"--api-key-env names {options.api_key_env}, which is not set in this kernel's "
                               "environment: set it there (the key stays out of the notebook) or leave the "
                               "option out for a server that needs no key.")
    if problem := resolved.key_problem(options.api_key_env):
        raise AgentConfigError(NO_MODEL if not name else
                               f"Model {name!r} is not an object in this notebook and {problem}.")
    return resolved.model_object(api_key_env=options.api_key_env or None,
                                 max_output_tokens=options.max_output_tokens or None,
                                 temperature=options.temperature)


def provider_base_url(name: str, options: AgentOptions) -> str | None:
    """``--base-url`` for the model named; a value that only came from ``$OPENAI_BASE_URL`` is for OpenAI (a plain
    name, ``openai:``) and no other provider."""
    provider = split_model(name)[0]
    from_env = options.base_url == os.environ.get("OPENAI_BASE_URL")
    if provider is not None and provider.name not in ("openai", "openai-compatible") and from_env:
        return None
    return options.base_url or None


def transcript_history(path: str) -> list[dict[str, Any]]:
    """The history of the transcript file at ``path``, repaired; AgentConfigError naming the file when there is none."""
    from ..listeners.transcript import load_transcript

    try:
        history = load_transcript(os.path.expanduser(path))
    except FileNotFoundError:
        raise AgentConfigError(f"--continue: there is no transcript {path!r}") from None
    except (OSError, UnicodeError) as e:
        raise AgentConfigError(f"--continue: cannot read {path!r} ({e})") from None
    if not history:
        raise AgentConfigError(f"--continue: {path!r} holds no history (is it a transcript? its lines are "
                               '{"event": "item", "item": {...}})')
    return history


def cassette_file(flag: str, path: str, read: Callable[[str], Model]) -> Model:
    """``read(path)``, its failures made one line naming the file (and the line, for a corrupt one)."""
    try:
        return read(os.path.expanduser(path))
    except FileNotFoundError:
        raise AgentConfigError(f"{flag}: there is no cassette {path!r} (record one with --record {path})") from None
    except IsADirectoryError:
        raise AgentConfigError(f"{flag}: {path!r} is a folder, not a cassette file") from None
    except (OSError, UnicodeError) as e:
        raise AgentConfigError(f"{flag}: cannot read {path!r} ({e})") from None
    except ValueError as e:  # names the file and the line
        raise AgentConfigError(f"{flag}: {e}") from None


def writable(flag: str, path: str) -> None:
    """AgentConfigError unless a file can be written at ``path`` (checked before the run, not at its first exchange)."""
    target = os.path.abspath(os.path.expanduser(path))
    folder = os.path.dirname(target)
    while folder and not os.path.exists(folder):
        folder = os.path.dirname(folder) if os.path.dirname(folder) != folder else ""
    if os.path.isdir(target):
        raise AgentConfigError(f"{flag}: {path!r} is a folder; give a file name such as {path.rstrip('/')}/run.jsonl")
    if not os.path.isdir(folder):
        raise AgentConfigError(f"{flag}: cannot write {path!r}: {folder!r} is a file, not a folder")
    if not os.access(folder, os.W_OK) or os.path.exists(target) and not os.access(target, os.W_OK):
        raise AgentConfigError(f"{flag}: cannot write {path!r} (permission denied)")
