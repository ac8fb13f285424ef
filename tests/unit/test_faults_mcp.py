"""Fault injection for MCP servers: whatever a server or its configuration does, the run goes on with a
clear outcome, no process is left behind, and nothing leaks into the notebook or to the model.

The configuration faults need no server. The others start the reference ``server-everything`` (over stdio, and over
streamable HTTP) through :func:`agentkernel.mcp.connect`, or a few lines of Python that misbehave as a server (exits
at once, never answers); each run is the loop's own, driven by a scripted model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_servers import EVERYTHING, ended, need, processes

from agentkernel import Call, LoopResult, ScriptedModel, StopSignal, run, validate_history
from agentkernel.errors import AgentConfigError
from agentkernel.mcp import MCPServer, ServerEntry, connect, load_config, parse_config, tool_name
from agentkernel.usage import Limits

EVERYTHING_ENTRY = {"command": "node", "args": [str(EVERYTHING)], "trustAnnotations": True}
LONG = Call("ev__trigger-long-running-operation", {"duration": 20, "steps": 20})  # 20 s unless cut


def outputs(result: LoopResult) -> list[str]:
    validate_history(result.history)
    return [item["output"] for item in result.history if item["type"] == "function_call_output"]


async def run_calls(server: MCPServer, rounds: list[Any], **options: Any) -> LoopResult:
    model = ScriptedModel([*rounds, "done"])
    return await run("go", model=model, tools=server.tools(), approve=lambda call, tool: True, **options)


# -- 1. a configuration that cannot work says where and why -------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not valid JSON"),
    ('{"servers": {}}', 'expected an object with "mcpServers"'),
    ('{"mcpServers": {"git": {"args": ["x"]}}}', "server 'git': give either \"command\""),
    ('{"mcpServers": {"git": {"command": "g", "url": "http://h/mcp"}}}', "server 'git': give either"),
    ('{"mcpServers": {"web": {"url": "ftp://h"}}}', "server 'web': url: String should match"),
    ('{"mcpServers": {"t": {"command": "t", "timeout": 0}}}', "server 't': timeout: Input should be greater than 0"),
    ('{"mcpServers": {"t": {"command": "t", "args": "--flag"}}}', "server 't': args: Input should be a valid"),
    ('{"mcpServers": {"t": {"type": "sse", "url": "http://h/sse"}}}', "server 't': type: Input should be"),
    ('{"mcpServers": {"t": {"type": "http", "command": "t"}}}', "\"type\": \"http\" does not fit"),
])
def test_a_malformed_configuration_names_the_file_and_the_entry(tmp_path: Path, text: str, message: str):
    path = tmp_path / "servers.json"
    path.write_text(text)
    with pytest.raises(AgentConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and message in str(caught.value), caught.value


def test_where_the_configuration_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("AGENTKERNEL_MCP_CONFIG", raising=False)
    with pytest.raises(AgentConfigError, match="no MCP configuration: there is no .mcp.json in"):
        load_config(cwd=tmp_path)
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"a": {"command": "a"}}}')
    assert list(load_config(cwd=tmp_path).servers) == ["a"]
    other = tmp_path / "other.json"
    other.write_text('{"mcpServers": {"b": {"url": "http://127.0.0.1:9/mcp", "headers": {"X": "1"}}}}')
    monkeypatch.setenv("AGENTKERNEL_MCP_CONFIG", str(other))
    config = load_config(cwd=tmp_path)
    assert list(config.servers) == ["b"] and config.servers["b"].transport == "streamable HTTP"
    assert list(load_config(tmp_path / ".mcp.json").servers) == ["a"]  # the explicit path wins
    with pytest.raises(AgentConfigError, match=r"has no MCP server 'c' \(its servers: b\)"):
        config.entry("c")


def test_keys_of_other_programs_are_ignored_and_agentkernels_are_read():
    config = parse_config({"mcpServers": {"t": {"command": "t", "disabled": False, "autoApprove": ["x"],
                                                "trustAnnotations": True, "timeout": 5, "startupTimeout": 7}}})
    entry = config.servers["t"]
    assert (entry.trust_annotations, entry.timeout, entry.startup_timeout) == (True, 5, 7)


# -- 2. names: sanitized, at most 64 characters, distinct ---------------------------------------------------------

@given(st.lists(st.tuples(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=80)), max_size=30))
def test_tool_names_are_valid_and_distinct(pairs: list[tuple[str, str]]):
    taken: set[str] = set()
    names = [tool_name(server, tool, taken) for server, tool in pairs]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in names)
    assert len(set(names)) == len(names)


def test_names_that_collide_after_sanitizing_are_kept_apart():
    taken: set[str] = set()
    assert [tool_name("my.git", "log", taken), tool_name("my git", "log", taken)] == ["my_git__log", "my_git__log_2"]
    long = [tool_name("s", "x" * 100, taken) for _ in range(3)]
    assert [len(n) for n in long] == [64, 64, 64] and long[1].endswith("_2") and long[2].endswith("_3")


# -- 3. servers that fail to start leave a clear error and no process ----------------------------------------------

def test_a_server_that_dies_at_start_quotes_its_stderr():
    pytest.importorskip("mcp")
    code = "import sys; print('cannot open the database: permission denied', file=sys.stderr); sys.exit(3)"
    entry = ServerEntry(command=sys.executable, args=("-c", code))

    async def main() -> None:
        with pytest.raises(AgentConfigError) as caught:
            async with connect({"mcpServers": {"db": entry.model_dump(by_alias=True)}}, "db"):
                pass
        message = str(caught.value)
        assert "MCP server 'db'" in message and "could not start" in message
        assert "cannot open the database: permission denied" in message

    asyncio.run(main())


TOKEN = "tok-" + "0123456789abcdefghij" * 2


@pytest.mark.parametrize("name", ["SERVICE_TOKEN", "DB_PASSWORD"])
def test_a_start_up_failure_is_one_error_without_its_configured_token(name: str):
    """The stderr tail quotes the server's complaint, never the token its entry configures (the
    kernel may not know that key yet: ``%agent_mcp restart`` starts a server before any run), and the error has no
    exception (group) as its context, which IPython would show as a full traceback."""
    pytest.importorskip("mcp")
    code = f"import os, sys; print('auth failed for', os.environ[{name!r}], 'at start', file=sys.stderr); sys.exit(3)"
    entry = {"command": sys.executable, "args": ["-c", code], "env": {name: TOKEN}}

    async def main() -> AgentConfigError:
        with pytest.raises(AgentConfigError) as caught:
            async with connect({"mcpServers": {"db": entry}}, "db"):
                pass
        return caught.value

    error = asyncio.run(main())
    message = str(error)
    assert "could not start" in message and f"auth failed for [secret ${name}] at start" in message, message
    assert TOKEN not in message and TOKEN[4:20] not in message
    assert error.__context__ is None and error.__cause__ is None


def test_a_kernel_secret_in_a_failing_servers_command_line_is_redacted(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("mcp")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)  # the kernel's secret set reads the environment at each use
    entry = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)", "--token", TOKEN]}

    async def main() -> str:
        with pytest.raises(AgentConfigError) as caught:
            async with connect({"mcpServers": {"gh": entry}}, "gh"):
                pass
        return str(caught.value)

    message = asyncio.run(main())
    assert "--token [secret $GITHUB_TOKEN]" in message and TOKEN[4:20] not in message, message


def test_a_server_that_never_answers_is_stopped_after_the_startup_timeout():
    pytest.importorskip("mcp")
    config = {"mcpServers": {"mute": {"command": sys.executable,
                                      "args": ["-c", "import time; time.sleep(600)  # faults-mute"],
                                      "startupTimeout": 1}}}

    async def main() -> float:
        started = time.monotonic()
        with pytest.raises(AgentConfigError, match="did not answer its handshake within 1 s"):
            async with connect(config, "mute"):
                pass
        return time.monotonic() - started

    assert asyncio.run(main()) < 10
    assert processes("faults-mute") == []


# -- 4. faults during calls ---------------------------------------------------------------------------------------

def test_a_server_killed_during_a_call_gives_that_call_an_error_and_restarts():
    need(everything=True)

    async def main() -> tuple[LoopResult, LoopResult]:
        async with connect({"mcpServers": {"ev": EVERYTHING_ENTRY}}, "ev") as server:
            async def kill_soon() -> None:
                await asyncio.sleep(1.0)
                for pid in processes(str(EVERYTHING)):
                    os.kill(pid, signal.SIGKILL)

            killer = asyncio.ensure_future(kill_soon())
            cut = await run_calls(server, [LONG])
            await killer
            again = await run_calls(server, [Call("ev__echo", {"message": "back"})])
            return cut, again

    cut, again = asyncio.run(main())
    [output] = outputs(cut)
    assert output.startswith("error: MCPToolError: MCP server 'ev' is gone"), output
    assert outputs(again) == ["Echo: back"]


def test_a_call_past_its_timeout_is_cut_and_the_server_still_answers():
    need(everything=True)
    config = {"mcpServers": {"ev": {**EVERYTHING_ENTRY, "timeout": 1}}}

    async def main() -> tuple[LoopResult, float]:
        async with connect(config, "ev") as server:
            started = time.monotonic()
            result = await run_calls(server, [Call("ev__trigger-long-running-operation", {"duration": 20, "steps": 5}),
                                              Call("ev__echo", {"message": "still here"})])
            return result, time.monotonic() - started

    result, seconds = asyncio.run(main())
    assert outputs(result) == ["error: ev__trigger-long-running-operation timed out after 1 s", "Echo: still here"]
    assert seconds < 5


def test_the_wall_clock_cuts_a_call_and_the_next_run_gets_the_server_at_once():
    need(everything=True)

    async def main() -> tuple[LoopResult, float, LoopResult, float]:
        async with connect({"mcpServers": {"ev": EVERYTHING_ENTRY}}, "ev") as server:
            started = time.monotonic()
            cut = await run_calls(server, [LONG], limits=Limits(max_seconds=1))
            cut_after = time.monotonic() - started
            started = time.monotonic()
            next_run = await run_calls(server, [Call("ev__echo", {"message": "next"})])
            return cut, cut_after, next_run, time.monotonic() - started

    cut, cut_after, next_run, next_after = asyncio.run(main())
    assert cut.status == "hit_wall_clock" and cut_after < 1.5
    assert outputs(cut)[0].startswith("aborted:")
    assert outputs(next_run) == ["Echo: next"] and next_after < 1.0


def test_outputs_are_capped_and_redacted(monkeypatch: pytest.MonkeyPatch):
    need(everything=True)
    key = "sk-faults-test-key-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)

    async def main() -> LoopResult:
        async with connect({"mcpServers": {"ev": EVERYTHING_ENTRY}}, "ev") as server:
            return await run_calls(server, [[Call("ev__echo", {"message": "x" * 50_000}),
                                             Call("ev__echo", {"message": f"the key is {key}"})]])

    big, secret = outputs(asyncio.run(main()))
    assert len(big) < 21_000 and "characters in all" in big
    assert secret == "Echo: the key is [secret $OPENAI_API_KEY]"


def test_a_servers_stderr_goes_to_its_log_not_to_the_notebook(capfd: pytest.CaptureFixture[str]):
    need(everything=True)  # it writes "Starting default (STDIO) server..." to stderr as it starts

    async def main() -> tuple[str, LoopResult]:
        async with connect({"mcpServers": {"ev": EVERYTHING_ENTRY}}, "ev") as server:
            result = await run_calls(server, [Call("ev__echo", {"message": "hi"})])
            return server.log_path.read_text(), result

    log, result = asyncio.run(main())
    assert outputs(result) == ["Echo: hi"]
    assert "Starting default (STDIO) server" in log
    assert "Starting default (STDIO) server" not in capfd.readouterr().err


def test_annotations_count_only_when_the_entry_trusts_them():
    need(everything=True)

    async def main() -> dict[str, dict[str, bool]]:
        modes = {}
        for trust in (False, True):
            config = {"mcpServers": {"ev": {**EVERYTHING_ENTRY, "trustAnnotations": trust}}}
            async with connect(config, "ev") as server:
                modes[str(trust)] = {t.name: t.read_only for t in server.tools()}
        return modes

    modes = asyncio.run(main())
    assert not any(modes["False"].values())
    assert modes["True"]["ev__echo"] and not modes["True"]["ev__toggle-simulated-logging"]


def test_structured_content_is_not_repeated_when_the_text_already_holds_it():
    need(everything=True)

    async def main() -> LoopResult:
        async with connect({"mcpServers": {"ev": EVERYTHING_ENTRY}}, "ev") as server:
            return await run_calls(server, [Call("ev__get-structured-content", {"location": "Chicago"})])

    [output] = outputs(asyncio.run(main()))
    assert output.count('"temperature"') == 1 and json.loads(output)["conditions"]


# -- 5. a streamable-HTTP server ----------------------------------------------------------------------------------

@pytest.fixture
def http_everything():
    """server-everything in its streamable-HTTP mode on a free loopback port; its URL."""
    need(everything=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(["node", str(EVERYTHING), "streamableHttp"], env={**os.environ, "PORT": str(port)},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("server-everything did not listen in HTTP mode")
                time.sleep(0.1)
        yield process, f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def test_a_streamable_http_server_and_its_disappearance(http_everything: tuple[subprocess.Popen[bytes], str]):
    process, url = http_everything
    config = {"mcpServers": {"web": {"url": url, "headers": {"X-Test": "1"}, "trustAnnotations": True}}}

    async def main() -> tuple[LoopResult, LoopResult]:
        async with connect(config, "web") as server:
            first = await run_calls(server, [Call("web__echo", {"message": "over http"})])
            process.kill()
            process.wait()
            gone = await run_calls(server, [Call("web__echo", {"message": "anyone?"})])
            return first, gone

    first, gone = asyncio.run(main())
    assert outputs(first) == ["Echo: over http"]
    [output] = outputs(gone)
    assert output.startswith("error: MCPToolError: MCP server 'web'"), output


class _Spy:
    """The session's write stream, recording the method of every message the client sends."""

    def __init__(self, stream: Any, sent: list[str]):
        self._stream, self._sent = stream, sent

    async def send(self, message: Any) -> None:
        self._sent.append(getattr(message.message, "method", "(response)"))
        await self._stream.send(message)

    async def __aenter__(self) -> _Spy:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._stream.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class SpiedServer(MCPServer):
    """The real stdio transport, its outgoing messages recorded (what the server is told cannot be seen otherwise)."""

    sent: list[str]

    async def _transport(self, stack: Any, log: Any) -> Any:
        transport = await super()._transport(stack, log)
        sent = self.sent = []

        @contextlib.asynccontextmanager
        async def spied():
            async with transport as (read, write):
                yield read, _Spy(write, sent)

        return spied()


def test_stop_during_a_call_tells_the_server():
    need(everything=True)

    async def main() -> tuple[LoopResult, list[str], float]:
        server = SpiedServer("ev", ServerEntry.model_validate(EVERYTHING_ENTRY))
        await server.start()
        try:
            stop = StopSignal()
            asyncio.get_running_loop().call_later(1.0, stop.set, "stopped by the test")
            started = time.monotonic()
            result = await run_calls(server, [LONG], stop=stop)
            return result, list(server.sent), time.monotonic() - started
        finally:
            await server.stop()

    result, sent, seconds = asyncio.run(main())
    assert result.status == "aborted" and seconds < 2
    assert sent[-2:] == ["tools/call", "notifications/cancelled"], sent


def test_the_kernels_servers_are_stopped_at_exit_on_its_stopped_loop():
    """What the atexit hook does when the kernel exits: its event loop has stopped but is not closed."""
    need("mcp-server-time")
    from agentkernel.jupyter.mcp_servers import KernelServers

    servers = KernelServers()
    config = parse_config({"mcpServers": {"time": {"command": "mcp-server-time",
                                                   "args": ["--local-timezone", "America/Lima"]}}})
    loop = asyncio.new_event_loop()
    try:
        started = loop.run_until_complete(servers.start(config, ["time"]))
        assert started["time"].running and processes("America/Lima")
        servers.stop_at_exit()
        assert not started["time"].running and ended("America/Lima")
    finally:
        loop.close()
