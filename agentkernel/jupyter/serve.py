"""``%agent_serve``: this kernel's tools served over MCP to an outside agent (Claude Code, Codex, Gemini CLI, VS Code),
every call behind the approvals, redaction, guards, budgets and Stop of a ``%%agent`` run.

The server runs on the kernel's own event loop (:mod:`agentkernel.mcp.serving`), so it answers between the user's
cells and while a cell awaits; a call that comes while a blocking cell runs waits for that cell to end. The serving
cell's panel shows each call as a section, asks Approve / Deny there, and its Stop ends the running call and the
session. When the session ends (Stop, ``%agent_serve stop``, a budget, the kernel's end) the panel becomes the
session's record in place, as a ``%%agent`` run's does, and its widgets are closed; the JSONL transcript is written as
the calls come (by default, as a run's).

The saved notebook holds no token, widget state included (nbclient, papermill and nbconvert save it, and so does
JupyterLab's "save widget state"): the token is written to a file only its user can read (:func:`token_file`, in
Jupyter's runtime folder beside the kernels' connection files), removed when the session ends, and the panel's
snippets read it from there (``$(cat FILE)``, or ``$AGENTKERNEL_TOKEN`` set from it).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import html
import json
import os
import re
import shlex
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from ..errors import AgentConfigError
from ..listeners.timeline import Timeline
from ..listeners.transcript import Transcript, run_transcript, transcript_dir
from ..secrets import KERNEL
from ..serve_stdio import TOKEN_ENV
from ..stop import StopSignal
from ..text import cut
from .markup import NO_MATH
from .panel import Panel, close_tree
from .plan import RunPlan, RunTools
from .render import TEXT_OUTPUT_CHARS, call_section, plain
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


def snippets(url: str, token_file: str) -> dict[str, str]:
    """How each client connects, ready to paste: none holds the token, each reads it from ``token_file`` (a shell
    pasting Claude Code's runs ``$(cat FILE)``; Codex and Gemini CLI read ``$AGENTKERNEL_TOKEN``, set from the file
    as their client's line says)."""
    read = f"$(cat {shlex.quote(token_file)})"
    env = f'{TOKEN_ENV}="{read}"'
    return {
        "Claude Code": f'claude mcp add --transport http {SERVER_NAME} {url} --header "Authorization: Bearer {read}"',
        "Codex (~/.codex/config.toml)": f"# start Codex with the token in ${TOKEN_ENV}: {env} codex\n"
                                         f'[mcp_servers.{SERVER_NAME}]\nurl = "{url}"\n'
                                         f'bearer_token_env_var = "{TOKEN_ENV}"',
        f"Gemini CLI (~/.gemini/settings.json; start it as {env} gemini)": json.dumps(
            {"mcpServers": {SERVER_NAME: {"httpUrl": url, "headers": {"Authorization": f"Bearer ${TOKEN_ENV}"}}}},
            indent=2),
        f"VS Code (.vscode/mcp.json; it asks for the token: cat {shlex.quote(token_file)})": json.dumps({
            "inputs": [{"type": "promptString", "id": "agentkernel-token", "password": True,
                        "description": f"the token of the notebook's session (cat {token_file})"}],
            "servers": {SERVER_NAME: {"type": "http", "url": url,
                                      "headers": {"Authorization": "Bearer ${input:agentkernel-token}"}}}},
            indent=2),
        "stdio clients": f"{env} {sys.executable} -m agentkernel.serve_stdio {url}",
    }


def client_name(label: str) -> str:
    """A snippet's client, as :func:`snippets` labels it: ``"Gemini CLI"`` for ``"Gemini CLI (~/.gemini/...)"``."""
    return label.split(" (")[0]


def token_file(port: int) -> Path:
    """Where a session on ``port`` keeps its token for the snippets: Jupyter's runtime folder (where the kernels'
    connection files, with their keys, are kept; ``$JUPYTER_RUNTIME_DIR``)."""
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir()) / f"agentkernel-serve-{port}.token"


def write_token(path: Path, token: str) -> None:
    """Write ``token`` to ``path``, readable and writable by its user only (a file left there is replaced, never
    followed if it is a link)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")


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

    def connect(self, server: MCPHTTPServer, token_path: str) -> None:
        """Show how to connect to ``server``: snippets that read the token from ``token_path`` (never the token)."""
        self.server = server
        server.on_change = self.schedule
        parts = [f"<b>serving this kernel's tools over MCP</b> at <code>{html.escape(server.url)}</code> "
                 f"({len(server.session.tools)} tools); every request needs the session's token, which is in "
                 f"<code>{html.escape(token_path)}</code> (yours only, removed when the session ends; also "
                 "<code>_agent_serve.headers</code>). To connect:"]
        for client, text in snippets(server.url, token_path).items():
            parts.append(f"<details><summary>{html.escape(client)}</summary><pre>{html.escape(text)}</pre></details>")
        self.connection.value = "".join(parts)
        self.flush(now=True)

    def close(self) -> None:
        super().close()
        close_tree(self.view)  # the connection's text and the panel, with their layouts and styles

    def cut_short(self) -> str:
        """An approval whose wait was cancelled: by Stop (or the session's end), else by the client."""
        session = self.server.session if self.server is not None else None
        if self.stop_signal.is_set() or session is None or session.ended:
            return super().cut_short()
        return "cancelled by the client"

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
    """The JSONL transcript of the session's calls (None with ``%config AgentMagics.transcripts = ''``)."""
    token_file: str = ""
    """The file the snippets read the token from (removed when the session ends)."""
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
        """The session has ended: its display becomes the session's record in place (HTML and plain text: a saved
        notebook holds no view of a dead widget model), the panel's widgets are closed (the kernel keeps none of an
        ended session) and the token file is removed."""
        atexit.unregister(self.kernel_ends)
        self.remove_token_file()
        if self.shown is not None:
            self.shown.update(session_record(self, self.panel.timeline), raw=True)
            self.shown = None
        self.panel.close()

    def kernel_ends(self) -> None:
        """The kernel's process ends while the session serves: the transcript says so, the token file goes, and the
        record replaces the panel if the front end can still hear it."""
        session = self.server.session
        session.on_end = None  # no event loop runs any more
        with contextlib.suppress(Exception):
            session.end("the kernel ended")
            session.close()
        with contextlib.suppress(Exception):
            self.close_view()
        self.remove_token_file()

    def remove_token_file(self) -> None:
        if self.token_file:
            with contextlib.suppress(OSError):
                os.unlink(self.token_file)

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
        from ..listeners.tracing import SessionSpans
        from ..listeners.tracing import wanted as tracing_wanted
        from ..mcp.serving import MCPHTTPServer
        from ..mcp.session import ServedSession

        session_id = uuid.uuid4().hex[:12]
        transcript = session_transcript(plan.options.transcripts, session_id)
        try:
            await tools.start()
        except BaseException:
            if transcript is not None:
                transcript.close()
            raise
        stop = StopSignal()
        panel = ServePanel(plan, stop)
        panel.turns = RunTurns(scheduler_of(shell), changed=panel.schedule) if shell is not None else None
        approve = plan.approver(panel, nobody=nobody, notebook=tools.notebook, untrusted=tools.mcp.untrusted())
        session = ServedSession(
            tools.tools(), approve,
            limits=plan.limits, guards=plan.guards, stop=stop, on_event=panel, transcript=transcript,
            turns=panel.turns, session_id=session_id)
        server = MCPHTTPServer(session, port=port)
        KERNEL.name(TOKEN_SECRET, lambda: server.token)  # no tool output, panel or transcript shows it
        try:
            await server.start()
            path = token_file(server.port)
            write_token(path, server.token)
        except BaseException as e:
            session.close()
            if server.serving:
                await server.stop()
            if isinstance(e, OSError):
                raise AgentConfigError(f"cannot write the session's token file ({e.strerror or e}): "
                                       "$JUPYTER_RUNTIME_DIR names the folder") from None
            raise
        if tracing_wanted(plan.options.tracing):  # (once the server is up: a session that never served is no tree)
            session.listeners.append(SessionSpans(session.session_id, [t.name for t in session.tools]))
        served = ServeSession(server, panel, str(transcript.path) if transcript else None, str(path), shell=shell)
        session.on_end = lambda why: self._ended(served, why)
        panel.connect(server, str(path))
        atexit.register(served.kernel_ends)
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


def session_transcript(setting: str | None, session_id: str) -> Transcript | None:
    """The session's JSONL transcript, as ``%%agent``'s: in ``$AGENTKERNEL_TRANSCRIPTS`` (else
    ``~/.agentkernel/transcripts``) unless ``transcripts`` names a folder, none when it is ``''``; AgentConfigError
    when it cannot be written."""
    if setting is not None and not setting:
        return None
    folder = transcript_dir() if setting is None else Path(setting).expanduser()
    try:
        return Transcript(run_transcript(folder, session_id))
    except OSError as e:
        raise AgentConfigError(f"transcripts: cannot write a transcript in {str(folder)!r} ({e.strerror or e}); "
                               "%config AgentMagics.transcripts = '' writes none") from None


def session_record(served: ServeSession, timeline: Timeline) -> dict[str, str]:
    """The ended session's record, as the serving cell keeps it: HTML (the headline, who connected, one section per
    call with its arguments and output, each approval and how it was answered, why the session ended), as a run's
    record is (:mod:`.render`), and the same as plain text. No widget view, no token, no timings or paths."""
    session, server = served.server.session, served.server
    n, denied = len(session.calls), timeline.denied
    head = [f"agent_serve: ended · {n} call{'s' * (n != 1)}"]
    head += [f"{denied} denied"] * bool(denied)
    head += [f"{server.rejected} refused without the token"] * bool(server.rejected)
    connected = "connected: " + (", ".join(session.clients) or "no client")  # as each client names itself
    why = f"why it ended: {session.ended or 'the session was closed'}"
    omission = (f"… {timeline.omitted} more entries are left out here; every call is in the session's transcript "
                "and in _agent_serve.calls")
    esc = html.escape
    parts = [f"<p><b>{esc(' · '.join(head))}</b></p>", f"<p><i>{esc(connected)}</i></p>"]
    lines = [" · ".join(head), plain(connected)]
    for index, entry in enumerate(timeline):
        if index == len(timeline.head) and timeline.omitted:
            parts.append(f"<p><i>{esc(omission)}</i></p>")
            lines.append(omission)
        if entry.kind == "approval":
            parts.append(f"<p><i>{esc(entry.title())}</i></p>")
            lines.append(f"? {entry.title()}")
        elif entry.kind == "call" and entry.call is not None:
            parts.append(call_section(entry))
            lines.append(f"▸ {entry.title()}")
            output = entry.result.output if entry.result else ""
            lines.extend(f"  │ {line}" for line in plain(cut(output, TEXT_OUTPUT_CHARS)).splitlines())
    parts.append(f"<p><b>{esc(why)}</b></p>")
    lines.append(plain(why))
    return {"text/html": f'<div class="agentkernel-record {NO_MATH}">\n' + "\n".join(parts) + "\n</div>",
            "text/plain": "\n".join(lines)}


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
