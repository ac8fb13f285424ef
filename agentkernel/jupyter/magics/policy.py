"""``%agent_policy``: the administrator's policy in force, and where each rule came from."""

from __future__ import annotations

from IPython.core.magic import line_magic, magics_class

from .shared import StateMagics


@magics_class
class PolicyMagics(StateMagics):
    """``%agent_policy`` (:mod:`agentkernel.jupyter.policy`)."""

    @line_magic
    def agent_policy(self, line: str) -> None:
        """``%agent_policy``: the administrator's policy in force (``agentkernel_policy.json`` in Jupyter's system
        and environment config folders: ceilings on cost, time and tool calls, the models, tools and MCP servers
        allowed, serving, writes, transcripts), each rule with the file it came from."""
        from ..policy import Policy

        print(Policy.load().describe())
