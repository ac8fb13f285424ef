"""What all of one kernel's agentkernel magics share: the shell and its namespace, the ``%config`` settings, the
option parser, the kernel's MCP servers and served session, the notes said once, and the awaited form of each magic.

One :class:`KernelState` is made by ``%load_ext`` (:func:`agentkernel.jupyter.magics.register`) and handed to every
``Magics`` class; the plain cell functions (:mod:`agentkernel.jupyter.cell`) take it instead of a magic.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..secrets import MIN_SECRET_CHARS
from .approvals import headless_runner, is_terminal, no_clicks_reason
from .options import AgentOptions, merge

if TYPE_CHECKING:  # started where a cell first uses them, so that %load_ext stays cheap
    from .background import BackgroundRuns
    from .mcp_servers import KernelServers
    from .serve import KernelServing

Awaited = Callable[[str, "str | None"], Awaitable[None]]
"""A magic's awaited form: ``(line, cell)`` (``cell`` None for a line magic), awaited by the rewritten cell."""


@dataclass(eq=False)
class KernelState:
    """One kernel's agentkernel state, shared by its magics.

    ``settings`` holds the ``%config AgentMagics.<option>`` traits (the ``AgentMagics`` instance): each option's
    default after the command line. ``parser`` is ``%%agent``'s option parser, which the other magics use too.
    """

    shell: Any
    settings: Any
    parser: argparse.ArgumentParser
    noted: set[tuple[str, str | None]] = field(default_factory=set)
    """What :meth:`note` and :meth:`note_short` said already (each once per kernel)."""
    told_transcripts: bool = False
    awaited: dict[str, Awaited] = field(default_factory=dict)
    """Each magic's awaited form by its name (``agent``, ``agent_serve``...), which the input transformer's one
    awaited entry (:meth:`AgentMagics.awaited`) dispatches to."""

    @functools.cached_property
    def mcp_servers(self) -> KernelServers:
        """The kernel's MCP servers, kept from the first cell that uses them to the kernel's end."""
        from .mcp_servers import KernelServers

        return KernelServers()

    @functools.cached_property
    def background(self) -> BackgroundRuns:
        """The kernel's background runs (``%%agent --background``), kept until the kernel ends."""
        from .background import BackgroundRuns

        return BackgroundRuns()

    @functools.cached_property
    def serving(self) -> KernelServing:
        """The kernel's served session (``%agent_serve``)."""
        from .serve import KernelServing

        return KernelServing()

    @property
    def user_ns(self) -> dict[str, Any]:
        """The notebook's namespace."""
        namespace: dict[str, Any] = self.shell.user_ns
        return namespace

    def merge(self, args: argparse.Namespace) -> AgentOptions:
        """The options parsed from a line, each unset one taken from ``%config``, the environment or its default."""
        return merge(args, self.settings)

    def expand_text(self, text: str) -> str:
        """``{expression}`` and ``$name`` replaced by IPython's rules for magic lines; a text with a field that does
        not evaluate (JSON, say) is left as written."""
        # var_expand also reads the locals of the frame `depth` levels up; past the top of the stack there is none,
        # so only the user namespace counts, as for a magic line at the top level of a cell.
        return str(self.shell.var_expand(text, depth=sys.getrecursionlimit()))

    def note(self, text: str) -> None:
        """Print ``agentkernel: text`` once per kernel (a malformed skill is reported once, not at every run)."""
        if ("", text) not in self.noted:
            self.noted.add(("", text))
            print(f"agentkernel: {text}")

    def note_short(self, names: list[str]) -> None:
        """Say (once per name and value) that a ``secret_env`` name is unset or too short to be kept secret."""
        for name in names:
            value = os.environ.get(name)
            if value is not None and len(value) >= MIN_SECRET_CHARS or (name, value) in self.noted:
                continue
            self.noted.add((name, value))
            why = "is not set" if value is None else f"is shorter than {MIN_SECRET_CHARS} characters"
            print(f"agentkernel: secret_env names {name}, which {why}: it is not treated as a secret")

    def nobody_answers(self, clickable: bool = True) -> str | None:
        """Why nobody can answer an approval in this cell (denied at once, saying so), or None."""
        where = no_clicks_reason() or headless_runner(self.shell)
        if where is None and not clickable:
            where = "autoawait is off, so the cell blocks and its panel cannot be clicked (%autoawait on lets it ask)"
        return where

    def interrupt_reason(self) -> str:
        """How a SIGINT is named in the run's ending: the user's Ctrl-C in terminal IPython, else the kernel's
        interrupt (a notebook's ■ button, or a console's Ctrl-C sent to the kernel)."""
        return "interrupted by you (Ctrl-C)" if is_terminal(self.shell) else "interrupted by the kernel interrupt"
