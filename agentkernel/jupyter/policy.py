"""An admin's policy no cell can exceed: ``agentkernel_policy.json`` in Jupyter's system and environment config
folders, never the user's own.

The folders are those of ``jupyter_core.paths`` an admin owns: each of ``$JUPYTER_CONFIG_PATH`` (which a hub's
spawner sets), ``{sys.prefix}/etc/jupyter``, ``/usr/local/etc/jupyter`` and ``/etc/jupyter``; not ``~/.jupyter``
nor the user site's. Every file found counts and the strictest value wins: the lowest ceiling, ``false`` over
``true``, a name only if every file's list allows it. A file that cannot be read, is not JSON, or holds a key or a
type the policy does not know makes :class:`Policy` *broken*: every run is then refused with that line (closed,
never silently open).

:meth:`Policy.apply` takes a cell's merged options: a value beyond a ceiling is refused with one line naming the
rule and its file; within it the user's value holds; an option left at its default gets the ceiling (a policy's
``max_cost`` becomes the run's budget when the cell sets none).

The policy governs what agentkernel runs for a cell. It is not a sandbox: code in the notebook can call any API
itself. Money is held by the gateway's key (see docs/classroom.md), the policy keeps cells within the course's plan.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import AgentConfigError

if TYPE_CHECKING:
    from .options import AgentOptions

POLICY_FILE = "agentkernel_policy.json"
CEILINGS = {"max_cost": "--max-cost", "max_seconds": "--max-seconds", "max_tool_calls": "--max-tool-calls"}
"""The policy's ceilings, each named for the option it bounds."""
LISTS = ("models", "tools", "mcp_servers")
SWITCHES = ("serve", "allow_writes", "transcripts")
KNOWN = {*CEILINGS, *LISTS, *SWITCHES, "comment"}


def policy_folders() -> list[str]:
    """The folders a policy is read from, in ``jupyter_core.paths``' order: ``$JUPYTER_CONFIG_PATH``, then the
    environment's and the system's config folders. The user's own (``~/.jupyter``, the user site) are not among
    them, and ``$JUPYTER_NO_CONFIG`` does not empty the list."""
    from jupyter_core.paths import ENV_CONFIG_PATH, SYSTEM_CONFIG_PATH

    named = [p.rstrip(os.sep) for p in os.environ.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p.strip()]
    return list(dict.fromkeys([*named, *ENV_CONFIG_PATH, *SYSTEM_CONFIG_PATH]))


@dataclass(frozen=True)
class Rule:
    """One rule in force: its value and the file it came from."""

    value: Any
    file: str


@dataclass(frozen=True)
class Policy:
    """The merged policy: for each key, the rules in force (a list per file for ``models``, ``tools`` and
    ``mcp_servers``, since each file's list must allow a name; one rule for the others, the strictest)."""

    rules: dict[str, list[Rule]] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    broken: str | None = None
    """The one line saying why the policy cannot be read: every run is refused with it."""

    @classmethod
    def load(cls, folders: Iterable[str] | None = None) -> Policy:
        """The policy of the files in ``folders`` (default: :func:`policy_folders`)."""
        rules: dict[str, list[Rule]] = {}
        files: list[str] = []
        for folder in policy_folders() if folders is None else folders:
            path = os.path.join(folder, POLICY_FILE)
            if not os.path.lexists(path):
                continue
            files.append(path)
            try:
                data = _read(path)
            except ValueError as e:
                return cls({}, tuple(files), f"the agentkernel policy {path} {e}: no run is allowed until it is "
                                             "fixed (ask your administrator)")
            for key, value in data.items():
                if key != "comment":
                    rules.setdefault(key, []).append(Rule(value, path))
        if len({r.value for r in rules.get("transcripts", [])}) > 1:  # kept here, none there: no reading is safe
            return cls({}, tuple(files), "the agentkernel policies disagree on transcripts ("
                                         + ", ".join(f"{r.file}: {json.dumps(r.value)}" for r in rules["transcripts"])
                                         + "): no run is allowed until they agree (ask your administrator)")
        for key in (*CEILINGS, *SWITCHES):
            if key in rules:
                rules[key] = [_strictest(key, rules[key])]
        return cls(rules, tuple(files))

    def ceiling(self, key: str) -> Rule | None:
        return self.rules[key][0] if key in self.rules else None

    def refused(self, key: str, rule: Rule, what: str) -> AgentConfigError:
        """The one line for a setting the policy does not allow."""
        return AgentConfigError(f"{what}: refused by the agentkernel policy ({key} = {json.dumps(rule.value)} in "
                                f"{rule.file})")

    def check_open(self) -> None:
        """AgentConfigError when the policy is broken (every run is refused)."""
        if self.broken:
            raise AgentConfigError(self.broken)

    def apply(self, options: AgentOptions) -> AgentOptions:
        """The options within the policy: AgentConfigError for one beyond it, the ceilings filled in for budgets
        left off (0), the tools left at their default narrowed to those allowed."""
        from .options import OPTIONS

        self.check_open()
        changes: dict[str, Any] = {}
        for key, flag in CEILINGS.items():
            if (rule := self.ceiling(key)) is None:
                continue
            value = getattr(options, key)
            if value > rule.value:
                raise self.refused(key, rule, f"{flag} {value:g} (from the cell or %config AgentMagics.{key})")
            if not value and not (key == "max_cost" and options.replay):  # a replay sends nothing, costs nothing
                changes[key] = rule.value
        if (rule := self.ceiling("allow_writes")) is not None and not rule.value and options.allow_writes:
            raise self.refused("allow_writes", rule, "--allow-writes (calls with side effects ask for approval)")
        if (rule := self.ceiling("transcripts")) is not None:
            if rule.value and options.transcripts == "":
                raise self.refused("transcripts", rule, "--no-transcript (every run keeps its transcript)")
            if not rule.value and options.transcripts:
                raise self.refused("transcripts", rule, f"transcripts = {options.transcripts!r} (runs keep none)")
            if not rule.value:
                changes["transcripts"] = ""
        if "tools" in self.rules:
            default = next(o.default for o in OPTIONS if o.name == "tools")
            if options.tools == default:  # the user asked for nothing in particular: what the policy allows of it
                changes["tools"] = [t for t in options.tools if self.allows("tools", t) is None]
        return replace(options, **changes) if changes else options

    def allows(self, key: str, name: str, *more: str) -> Rule | None:
        """The first rule of ``key`` (a list) that allows neither ``name`` nor any of ``more`` (None: allowed)."""
        for rule in self.rules.get(key, []):
            if not any(fnmatch.fnmatchcase(n, pattern) for pattern in rule.value for n in (name, *more)):
                return rule
        return None

    def check_model(self, name: str) -> None:
        """AgentConfigError unless every ``models`` list allows the provider's model ``name`` (``gpt-4.1-mini`` or
        ``provider:model``; a plain name is also matched as ``openai:name``, and ``openai:name`` as the plain name)."""
        from ..models.providers import split_model

        provider, model = split_model(name)
        full = f"{provider.name if provider else 'openai'}:{model}"
        if (rule := self.allows("models", name, full, *([model] if full.startswith("openai:") else []))) is not None:
            raise self.refused("models", rule, f"the model {name!r}")

    def check_tool(self, word: str) -> None:
        """AgentConfigError unless every ``tools`` list allows the ``--tools`` word (a built-in or notebook tool)."""
        if (rule := self.allows("tools", word)) is not None:
            raise self.refused("tools", rule, f"the tool {word!r}")

    def check_server(self, server: str) -> None:
        """AgentConfigError unless every ``mcp_servers`` list allows the MCP server."""
        if (rule := self.allows("mcp_servers", server)) is not None:
            raise self.refused("mcp_servers", rule, f"the MCP server {server!r}")

    def check_serve(self) -> None:
        """AgentConfigError when the policy turns ``%agent_serve`` off (or is broken)."""
        self.check_open()
        if (rule := self.ceiling("serve")) is not None and not rule.value:
            raise self.refused("serve", rule, "%agent_serve (serving this kernel's tools)")

    def describe(self) -> str:
        """What is in force and where it came from, for ``%agent_policy``."""
        if self.broken:
            return self.broken
        searched = ", ".join(policy_folders())
        if not self.files:
            return f"no agentkernel policy: no {POLICY_FILE} in {searched}"
        lines = [f"agentkernel policy from {', '.join(self.files)}:"]
        for key in (*LISTS, *CEILINGS, *SWITCHES):
            for rule in self.rules.get(key, []):
                shown = ", ".join(rule.value) if isinstance(rule.value, list) else json.dumps(rule.value)
                lines.append(f"  {key:<15} {shown}   ({rule.file})")
        return "\n".join(lines)


def _read(path: str) -> dict[str, Any]:
    """A policy file's rules, checked: ValueError (completing "the policy PATH ...") for anything else."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ValueError(f"cannot be read ({e.strerror or e})") from None
    except (UnicodeError, json.JSONDecodeError) as e:
        raise ValueError(f"is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"holds a {type(data).__name__}, not an object of rules")
    for key, value in data.items():
        if key not in KNOWN:
            raise ValueError(f"has the unknown rule {key!r} (known: {', '.join(sorted(KNOWN - {'comment'}))})")
        if key in LISTS and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ValueError(f"has {key} = {json.dumps(value)}, not a list of names")
        if key in SWITCHES and not isinstance(value, bool):
            raise ValueError(f"has {key} = {json.dumps(value)}, not true or false")
        if key in CEILINGS:
            kind = int if key == "max_tool_calls" else int | float
            if not (isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
                raise ValueError(f"has {key} = {json.dumps(value)}, not a {'whole ' * (kind is int)}number more "
                                 "than 0")
        if key == "comment" and not isinstance(value, str):
            raise ValueError(f"has comment = {json.dumps(value)}, not a text")
    return data


def _strictest(key: str, rules: list[Rule]) -> Rule:
    """Of several files' values: the lowest ceiling, ``false`` over ``true`` (for ``transcripts`` the files must
    agree, which :meth:`Policy.load` checks)."""
    if key in CEILINGS:
        return min(rules, key=lambda r: r.value)
    if key == "transcripts":
        return rules[0]
    return min(rules, key=lambda r: bool(r.value))
