"""``%agent_serve``: this kernel's tools served over MCP to an outside agent (Claude Code, Codex, Gemini CLI, VS Code),
every call behind the approvals, redaction, guards, budgets and Stop of a ``%%agent`` run.

The server runs on the kernel's own event loop (:mod:`agentkernel.mcp.serving`), so it answers between the user's
cells and while a cell awaits; a call that comes while a blocking cell runs waits for that cell to end. The serving
cell's panel shows each call as a section, asks Approve / Deny there, and its Stop ends the running call and the
session. The saved notebook holds no token: the panel's connection snippets live in widget state, and the cell's
saved text says to read ``_agent_serve.headers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ..errors import AgentConfigError
from ..record.transcript import Transcript, transcript_dir
from ..secrets import KERNEL
from ..serve_stdio import TOKEN_ENV
from ..stop import StopSignal
from .panel import Panel, close_tree
from .plan import RunPlan, RunTools
from .scheduler import RunTurns, scheduler_of

if TYPE_CHECKING:  # agentkernel.mcp (and pydantic) are imported when a session starts, not at %load_ext
    from ..mcp.serving import MCPHTTPServer
    from ..mcp.session import ServedCall

SERVE_TEXT = ("[agentkernel: this kernel's tools are served over MCP while the session lasts; _agent_serve.url and "
              "_agent_serve.headers say how to connect, %agent_serve stop ends it]")
"""The serving cell's saved text: fixed (nbval compares it), and without the token."""
SERVER_NAME = "notebook"
TOKEN_SECRET = "AGENT_SERVE_TOKEN"
PORT = re.compile(r"(?:^|\s)--port(?:=|\s+|$)(\S*)")
STOP_GRACE = 0.5
"""Seconds between Stop and the server's shutdown: the cut call's error result is sent meanwhile."""


def snippets(url: str, token: str) -> dict[str, str]:
    """How each client connects, ready to paste (the token written in, for the live panel only)."""
    bearer = f"Bearer {token}"
    return {
        "Claude Code": f'claude mcp add --transport http {SERVER_NAME} {url} --header "Authorization: {bearer}"',
        "Codex (~/.codex/config.toml)": f'[mcp_servers.{SERVER_NAME}]\nurl = "{url}"\n'
                                         f'http_headers = {{ "Authorization" = "{bearer}" }}',
        "Gemini CLI (~/.gemini/settings.json)": json.dumps(
            {"mcpServers": {SERVER_NAME: {"httpUrl": url, "headers": {"Authorization": bearer}}}}, indent=2),
        "VS Code (.vscode/mcp.json, asks for the token)": json.dumps({
            "inputs": [{"type": "promptString", "id": "agentkernel-token", "password": True,
                        "description": "the token in _agent_serve.headers"}],
            "servers": {SERVER_NAME: {"type": "http", "url": url,
                                      "headers": {"Authorization": "Bearer ${input:agentkernel-token}"}}}},
            indent=2),
        "stdio clients": f"{TOKEN_ENV}={token} {sys.executable} -m agentkernel.serve_stdio {url}",
    }


class ServePanel(Panel):
    """The run panel for a served session: its connection above the Stop button, each call as a section."""

    scope = "session"  # an approval for the rest of the session: one runner serves every call

    def __init__(self, plan: RunPlan, stop: StopSignal):
        self.server: MCPHTTPServer | None = None
        self.turns: RunTurns | None = None
        super().__init__(plan.limits, stop, throttle=plan.options.stream_throttle)
        self.state = "serving"
        self.stop_button.tooltip = "End the session: the running call is cut, no call runs after"
        self.connection = widgets.HTML()
        self.view = widgets.VBox([self.connection, self.widget])

    def connect(self, server: MCPHTTPServer) -> None:
        """Show how to connect to ``server`` (the token only here, in widget state)."""
        self.server = server
        server.on_change = self.schedule
        parts = [f"<b>serving this kernel's tools over MCP</b> at <code>{html.escape(server.url)}</code> "
                 f"({len(server.session.tools)} tools); every request needs the header in "
                 "<code>_agent_serve.headers</code>. To connect:"]
        for client, text in snippets(server.url, server.token).items():
            parts.append(f"<details><summary>{html.escape(client)}</summary><pre>{html.escape(text)}</pre></details>")
        self.connection.value = "".join(parts)
        self.flush(now=True)

    def close(self) -> None:
        super().close()
        close_tree(self.view)  # the connection's text and the panel, with their layouts and styles

    def refresh(self) -> None:
        if self.server is None:
            return super().refresh()
        session, elapsed = self.server.session, time.monotonic() - self.started
        parts = [self.state, f"{self.calls} call{'s' * (self.calls != 1)}"]
        parts += [f"{session.waiting} waiting"] * bool(session.waiting)
        if self.turns is not None and self.turns.waiting:
            parts.append(f"a call is {self.turns.waiting}")
        parts += [f"{self.timeline.denied} denied"] * bool(self.timeline.denied)
        parts += [f"{self.server.rejected} refused without the token"] * bool(self.server.rejected)
        if self.server.clients:
            parts.append("connected: " + ", ".join(html.escape(name) for name in self.server.clients))
        status = f"<code>{' · '.join(parts)} · {elapsed:.0f} s</code>"
        if status != self.status.value:
            self.status.value = status
        for key, value in (("seconds", elapsed), ("calls", self.calls)):
            if key in self.bars:
                self.bars[key].value = min(float(value), self.bars[key].max)


@dataclass(repr=False)
class ServeSession:
    """``_agent_serve``: one served session, its address, what a client must send, and the record of its calls."""

    server: MCPHTTPServer
    panel: ServePanel
    transcript: str | None = None
    """The JSONL transcript of the session's calls (None with ``%config AgentMagics.transcripts = False``)."""
    started: float = field(default_factory=time.time)
    shown: Any = None
    """The serving cell's display of the panel (a ``DisplayHandle``), while the session lasts."""
    shell: Any = None
    """The kernel's shell (None outside one)."""

    @contextlib.contextmanager
    def lend(self) -> Iterator[None]:
        """For a cell that calls this kernel's own server and waits for the answer: while the block runs, calls that
        touch the kernel run at the cell's awaits instead of waiting for the cell to end (which would be never)::

            with _agent_serve.lend():
                await client.call_tool("inspect_variable", {"name": "sales"})
        """
        if self.panel.turns is None:
            yield
            return
        with self.panel.turns.scheduler.lent():
            yield

    def close_view(self) -> None:
        """The session has ended: its display keeps only the fixed text (a saved notebook holds no view of a dead
        widget model) and the panel's widgets are closed (the kernel keeps none of an ended session)."""
        if self.shown is not None:
            self.shown.update({"text/plain": SERVE_TEXT}, raw=True)
            self.shown = None
        self.panel.close()

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def headers(self) -> dict[str, str]:
        """The headers every request must carry (the bearer token): keep them out of saved outputs."""
        return self.server.headers

    @property
    def calls(self) -> list[ServedCall]:
        return self.server.session.calls

    @property
    def tools(self) -> list[str]:
        return [t.name for t in self.server.session.tools]

    @property
    def ended(self) -> str:
        """Why the session ended ("" while it serves)."""
        return self.server.session.ended

    def __repr__(self) -> str:
        state = f"ended: {self.ended}" if self.ended else "serving"
        return (f"<agentkernel serve {self.url} · {state} · {len(self.calls)} calls · tools: {', '.join(self.tools)}; "
                "the token is in .headers>")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))


class KernelServing:
    """The kernel's served session (one at a time)."""

    def __init__(self) -> None:
        self.current: ServeSession | None = None

    async def start(self, plan: RunPlan, tools: RunTools, *, port: int, nobody: str | None,
                    shell: Any = None) -> ServeSession:
        """Serve ``tools`` as ``plan`` says (its MCP servers started first); the magic shows the panel."""
        if self.current is not None and self.current.server.serving:
            raise AgentConfigError(f"a session is already serving at {self.current.url}: %agent_serve stop ends it")
        from ..mcp.serving import MCPHTTPServer
        from ..mcp.session import ServedSession
        from ..tracing import SessionSpans
        from ..tracing import wanted as tracing_wanted

        await tools.start()
        stop = StopSignal()
        panel = ServePanel(plan, stop)
        path = None
        if plan.options.transcripts:
            path = transcript_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-serve.jsonl"
        panel.turns = RunTurns(scheduler_of(shell), changed=panel.schedule) if shell is not None else None
        approve = plan.approver(panel, nobody=nobody, notebook=tools.notebook, untrusted=tools.mcp.untrusted())
        session = ServedSession(
            tools.tools(), approve,
            limits=plan.limits, guards=plan.guards, stop=stop, on_event=panel,
            transcript=Transcript(path) if path else None, turns=panel.turns)
        server = MCPHTTPServer(session, port=port)
        KERNEL.name(TOKEN_SECRET, lambda: server.token)  # no tool output, panel or transcript shows it
        await server.start()
        if tracing_wanted(plan.options.tracing):  # (once the server is up: a session that never served is no tree)
            session.listeners.append(SessionSpans(session.session_id, [t.name for t in session.tools]))
        served = ServeSession(server, panel, str(path) if path else None, shell=shell)
        session.on_end = lambda why: self._ended(served, why)
        panel.connect(server)
        self.current = served
        return served

    def _ended(self, served: ServeSession, why: str) -> None:
        """The session ended (Stop, a budget, ``%agent_serve stop``): the panel says so, and the server stops soon
        after (so that the call it cut still gets its error result)."""
        loop = asyncio.get_running_loop()
        loop.call_later(STOP_GRACE, lambda: loop.create_task(served.server.stop()))
        loop.call_later(STOP_GRACE, served.close_view)

    async def stop(self) -> str:
        """End the current session; what to print."""
        served = self.current
        if served is None or (served.ended and not served.server.serving):
            return "no session is serving"
        served.server.session.end("ended with %agent_serve stop")
        await served.server.stop()
        served.close_view()
        n = len(served.calls)
        said = f"the session has ended after {n} call{'s' * (n != 1)}"
        if served.shell is not None:
            from .kernel.undo import journals_of

            journal = journals_of(served.shell).runs.get(served.server.session.session_id)
            if journal is not None and journal.names:
                said += f"; %agent_undo {journal.run_id} takes back what its calls did to the variables"
        return said


def port_option(line: str) -> tuple[int, str]:
    """``--port N`` (or ``--port=N``) taken out of a ``%agent_serve`` line: the port (0: a free one) and the rest
    of the line."""
    found = PORT.search(line)
    if found is None:
        return 0, line
    value = found.group(1)
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise AgentConfigError(f"--port needs a port number (1-65535), not {value!r}")
    return int(value), line[:found.start()] + line[found.end():]
