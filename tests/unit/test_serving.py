"""Serving tools over MCP without a kernel: the official ``mcp`` client over Streamable HTTP against
:class:`~agentkernel.mcp.serving.MCPHTTPServer` on this test's event loop. The token, Host and Origin checks, the
annotations, the runner's redaction, the guards speaking to the client, the budgets, Stop and the client's own
cancellation."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agentkernel import Decision, tool
from agentkernel.guards import GuardConfig
from agentkernel.mcp.serving import MCPHTTPServer
from agentkernel.mcp.session import ServedSession
from agentkernel.secrets import KERNEL
from agentkernel.stop import StopSignal
from agentkernel.usage import Limits

pytest.importorskip("mcp")
import httpx2  # noqa: E402 - after the skip
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from timing import until  # noqa: E402

SECRET = "sk-served-secret-0123456789abcdef"
ran: list[str] = []


@tool
def peek(key: str) -> str:
    """Read a value."""
    ran.append(f"peek {key}")
    return f"value of {key}: {os.environ.get('SERVED_TEST_KEY', '')}"


@tool(read_only=False)
def change(text: str) -> str:
    """Change something."""
    ran.append(f"change {text}")
    return "changed"


@tool
async def spin(seconds: float) -> str:
    """Wait."""
    ran.append("spin")
    await asyncio.sleep(seconds)
    return "done spinning"


@asynccontextmanager
async def served(approve: Any = None, **options: Any) -> AsyncIterator[MCPHTTPServer]:
    session = ServedSession([peek, change, spin], approve, **options)
    server = MCPHTTPServer(session)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@asynccontextmanager
async def client(server: MCPHTTPServer, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers=server.headers if headers is None else headers) as http, \
            Client(streamable_http_client(server.url, http_client=http)) as c:
        yield c


def text(result: Any) -> str:
    return "".join(part.text for part in result.content if part.type == "text")


def run(main: Any) -> None:
    ran.clear()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_tools_are_listed_with_truthful_annotations_and_a_read_only_call_runs():
    async def main() -> None:
        async with served() as server, client(server) as c:
            listed = {t.name: t for t in (await c.list_tools()).tools}
            assert listed["peek"].annotations.read_only_hint is True
            assert listed["peek"].annotations.destructive_hint is False
            assert listed["change"].annotations.read_only_hint is False
            assert listed["change"].annotations.destructive_hint is True
            assert listed["peek"].input_schema["required"] == ["key"]
            result = await c.call_tool("peek", {"key": "a"})
            assert not result.is_error and text(result).startswith("value of a")
            assert [c.name for c in server.session.calls] == ["peek"]
            assert [name.split()[0] for name in server.clients] == ["mcp"]  # the client, as it names itself

    run(main)


def test_a_secret_reaches_the_client_only_as_its_marker(monkeypatch):
    monkeypatch.setenv("SERVED_TEST_KEY", SECRET)
    KERNEL.configure(env_names=["SERVED_TEST_KEY"])

    async def main() -> None:
        async with served() as server, client(server) as c:
            result = await c.call_tool("peek", {"key": "a"})
            assert SECRET not in text(result) and "[secret $SERVED_TEST_KEY]" in text(result)

    try:
        run(main)
    finally:
        KERNEL.configure()


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}])
def test_a_request_without_the_token_gets_401_and_runs_nothing(headers: dict[str, str]):
    async def main() -> None:
        async with served() as server:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "peek", "arguments": {}}}
            async with httpx2.AsyncClient() as http:
                answer = await http.post(server.url, json=body, headers={
                    **headers, "Accept": "application/json, text/event-stream"})
            assert answer.status_code == 401 and server.rejected == 1
            with pytest.raises(Exception):  # noqa: B017,PT011 - the SDK's own error for a 401
                async with client(server, headers) as c:
                    await c.list_tools()
            assert ran == [] and server.session.calls == []

    run(main)


@pytest.mark.parametrize("extra", [{"Host": "evil.example:80"}, {"Origin": "http://evil.example"}])
def test_another_host_or_origin_is_refused(extra: dict[str, str]):
    async def main() -> None:
        async with served() as server:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "peek", "arguments": {}}}
            async with httpx2.AsyncClient() as http:
                answer = await http.post(server.url, json=body, headers={
                    **server.headers, **extra, "Accept": "application/json, text/event-stream"})
            assert answer.status_code in (403, 421), answer.status_code
            assert ran == []

    run(main)


def test_a_side_effecting_call_asks_and_a_denial_with_its_note_is_the_tools_error():
    asked = []

    def approve(call, tool):
        asked.append(call.name)
        return Decision(False, note="not today")

    async def main() -> None:
        async with served(approve) as server, client(server) as c:
            result = await c.call_tool("change", {"text": "x"})
            assert result.is_error and "not today" in text(result)
            assert asked == ["change"] and ran == []

    run(main)


def test_the_guards_tell_the_client_then_refuse():
    async def main() -> None:
        async with served(guards=GuardConfig(repeat_limit=3)) as server, client(server) as c:
            first = await c.call_tool("peek", {"key": "k"})
            second = await c.call_tool("peek", {"key": "k"})
            third = await c.call_tool("peek", {"key": "k"})
            fourth = await c.call_tool("peek", {"key": "k"})
            assert "note:" not in text(first)
            assert "returned this same output 2 times" in text(second) and not second.is_error
            assert "REPEATED_TOOL_CALL" in text(third)
            assert fourth.is_error and text(fourth).startswith("refused: REPEATED_TOOL_CALL")
            assert ran == ["peek k"] * 3  # the fourth never ran
            other = await c.call_tool("peek", {"key": "other"})
            assert not other.is_error

    run(main)


def test_the_tool_call_budget_ends_the_session():
    async def main() -> None:
        async with served(limits=Limits(max_tool_calls=2)) as server, client(server) as c:
            await c.call_tool("peek", {"key": "a"})
            await c.call_tool("peek", {"key": "b"})
            third = await c.call_tool("peek", {"key": "c"})
            assert third.is_error and "HIT_TOOL_CALL_CAP" in text(third)
            assert server.session.ended.startswith("HIT_TOOL_CALL_CAP") and len(ran) == 2

    run(main)


def test_stop_cuts_the_running_call_and_the_client_gets_an_error_result():
    stop = StopSignal()

    async def main() -> None:
        async with served(stop=stop) as server, client(server) as c:
            asyncio.get_running_loop().call_later(0.5, stop.set, "stopped with the Stop button")
            began = time.monotonic()
            result = await c.call_tool("spin", {"seconds": 30})
            assert time.monotonic() - began < 2
            assert result.is_error and "aborted" in text(result) and "Stop" in text(result)
            after = await c.call_tool("peek", {"key": "a"})
            assert after.is_error and "ended" in text(after)

    run(main)


def test_the_sessions_clock_cuts_the_running_call_and_ends_the_session():
    async def main() -> None:
        async with served(limits=Limits(max_seconds=1.0)) as server, client(server) as c:
            began = time.monotonic()
            result = await c.call_tool("spin", {"seconds": 30})
            assert time.monotonic() - began < 3
            assert result.is_error and "HIT_WALL_CLOCK" in text(result)
            after = await c.call_tool("peek", {"key": "a"})
            assert after.is_error and "HIT_WALL_CLOCK" in text(after) and ran == ["spin"]

    run(main)


def test_a_tools_own_timeout_holds_per_call():
    @tool(timeout=0.3)
    async def slow() -> str:
        """Take too long."""
        await asyncio.sleep(30)
        return "never"

    async def main() -> None:
        server = MCPHTTPServer(ServedSession([slow]))
        await server.start()
        try:
            async with client(server) as c:
                result = await c.call_tool("slow", {})
                assert result.is_error and "timed out after 0.3 s" in text(result)
                assert not server.session.ended  # the session goes on
        finally:
            await server.stop()

    run(main)


def test_the_clients_cancellation_cancels_the_call_and_the_next_one_runs():
    async def main() -> None:
        async with served() as server, client(server) as c:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(c.call_tool("spin", {"seconds": 30}), 0.5)
            await until(lambda: server.session.running is None, "the cancelled call ended")
            result = await c.call_tool("peek", {"key": "a"})
            assert not result.is_error
            assert [(c.name, c.status) for c in server.session.calls] == [("spin", "aborted"), ("peek", "ok")]

    run(main)


def test_a_long_call_sends_progress():
    seen: list[float] = []

    async def main() -> None:
        async with served() as server, client(server) as c:
            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append(value)

            result = await c.call_tool("spin", {"seconds": 2.5}, progress_callback=progress)
            assert text(result) == "done spinning"

    run(main)
    assert len(seen) >= 2 and seen == sorted(seen)


def test_the_record_keeps_every_call(tmp_path):
    from agentkernel.listeners.transcript import Transcript

    async def main() -> None:
        transcript = Transcript(tmp_path / "s.jsonl")
        async with served(transcript=transcript) as server, client(server) as c:
            await c.call_tool("peek", {"key": "a"})
            await c.call_tool("nosuch", {})
            assert [(c.name, c.status) for c in server.session.calls] == [("peek", "ok"), ("nosuch", "error")]

    run(main)
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert lines[0]["event"] == "start" and lines[-1]["event"] == "finish"
    assert sum(1 for line in lines if line.get("event") == "item") == 4


def test_the_transcript_is_a_listener_and_the_session_keeps_no_item_it_told(tmp_path):
    """A served session's transcript hears the session's events (start, each client, each call's items, the end)
    through the session's redacting listeners, and the listeners keep none of the items they told: 50 calls of
    1 MB arguments leave nothing in their memo, and every line written holds at most :data:`KEPT_CHARS` of a call."""
    from agentkernel.listeners.transcript import Transcript

    huge = "k" * 1_000_000

    async def main() -> None:
        transcript = Transcript(tmp_path / "s.jsonl")
        async with served(transcript=transcript) as server, client(server) as c:
            assert transcript in server.session.listeners
            for i in range(50):
                await c.call_tool("peek", {"key": f"{i}{huge}"})
            assert server.session.listeners.told == {}
            server.session.end("done here")

    run(main)
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [line["event"] for line in lines][:2] == ["start", "client"] and lines[0]["served"] == [
        "peek", "change", "spin"]
    assert lines[-1]["event"] == "finish" and lines[-1]["detail"] == "done here"
    items = [line["item"] for line in lines if line["event"] == "item"]
    assert len(items) == 100
    assert max(len(json.dumps(item)) for item in items) < KEPT_CHARS + 400


@pytest.mark.parametrize(("line", "port", "rest"), [
    ("", 0, ""), ("--port 8123", 8123, ""), ("--port=8123 --allow-writes", 8123, " --allow-writes"),
    ("--tools run_python --port 9000", 9000, "--tools run_python"), ("--report x", 0, "--report x"),
])
def test_the_port_is_taken_out_of_the_line(line: str, port: int, rest: str):
    from agentkernel.jupyter.serve import port_option

    assert port_option(line) == (port, rest)


@pytest.mark.parametrize("line", ["--port", "--port 0", "--port 70000", "--port=abc", "--port -1"])
def test_a_bad_port_is_one_line(line: str):
    from agentkernel.errors import AgentConfigError
    from agentkernel.jupyter.serve import port_option

    with pytest.raises(AgentConfigError, match="--port needs a port number"):
        port_option(line)


# -- what the session keeps of a call: bounded, whatever an outside agent sends ---------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentkernel.mcp.session import KEPT_CHARS, compared, kept_call, kept_result  # noqa: E402
from agentkernel.tools import ToolCall, ToolResult  # noqa: E402

LONG = st.builds(lambda unit, length, tail: (unit * (length // len(unit) + 1))[:length] + tail,
                 st.text(min_size=1, max_size=20), st.integers(KEPT_CHARS - 5, 3 * KEPT_CHARS), st.text(max_size=20))
"""Texts around and well over :data:`KEPT_CHARS` (Hypothesis draws no text that long itself)."""


@given(arguments=st.one_of(st.text(max_size=200), LONG), output=st.one_of(st.text(max_size=200), LONG))
def test_a_kept_call_and_result_are_bounded_and_short_ones_kept_whole(arguments: str, output: str):
    call = ToolCall("call_1", "peek", arguments)
    result = kept_result(ToolResult(call, "ok", output))
    assert len(kept_call(call).arguments) <= KEPT_CHARS + 40 and len(result.output) <= KEPT_CHARS + 40
    assert len(result.call.arguments) <= KEPT_CHARS + 40
    if len(arguments) <= KEPT_CHARS:
        assert kept_call(call) is call and result.call is call
    if len(output) <= KEPT_CHARS:
        assert result.output == output
    assert result.status == "ok" and result.call.call_id == "call_1"


@given(a=LONG, b=LONG)
def test_the_guards_compare_long_texts_by_digest_bounded_and_without_collisions(a: str, b: str):
    assert len(compared(a)) <= (len(a) if len(a) <= KEPT_CHARS else 400)
    assert (compared(a) == compared(b)) == (a == b)
    assert compared(a) == compared(a[:]) and compared(a + "x") != compared(a)


def test_a_repeated_huge_call_still_trips_the_guard_and_nothing_kept_is_huge():
    """The guards compare digests of long arguments: three identical 1 MB calls trip REPEATED_TOOL_CALL as three
    short ones do, and a fourth is refused without running."""
    huge = "k" * 1_000_000

    async def main() -> None:
        async with served(guards=GuardConfig(repeat_limit=3)) as server, client(server) as c:
            said = [text(await c.call_tool("peek", {"key": huge})) for _ in range(4)]
            assert "REPEATED_TOOL_CALL" in said[2] and said[3].startswith("refused: REPEATED_TOOL_CALL")
            assert ran.count(f"peek {huge}") == 3
            kept = [len(c.call.arguments) + len(c.result.output) for c in server.session.calls]
            assert max(kept) < 3 * KEPT_CHARS
            keys = [key for key in server.session.repeats.counts] + list(server.session.refused)
            assert max(len("".join(k)) for k in keys) < 2000

    run(main)


def test_a_served_sessions_approvals_are_events_bounded_and_redacted(monkeypatch: pytest.MonkeyPatch):
    """The served session's runner tells its approvals as a run's does (asked, then decided with who), through the
    session's listeners: a call's arguments kept to :data:`KEPT_CHARS`, a secret in them redacted."""
    from agentkernel.events import ApprovalAsked, ApprovalDecided

    monkeypatch.setenv("SERVED_TEST_KEY", SECRET)
    KERNEL.configure(env_names=["SERVED_TEST_KEY"])
    heard: list[Any] = []
    huge = SECRET + "k" * 1_000_000

    async def main() -> None:
        async with served(lambda call, t: True, on_event=heard.append) as server, client(server) as c:
            assert text(await c.call_tool("change", {"text": huge})) == "changed"

    try:
        run(main)
    finally:
        KERNEL.configure()
    told = [e for e in heard if isinstance(e, ApprovalAsked | ApprovalDecided)]
    assert [type(e).__name__ for e in told] == ["ApprovalAsked", "ApprovalDecided"]
    decided = told[-1]
    assert isinstance(decided, ApprovalDecided) and (decided.approved, decided.by) == (True, "user")
    assert all(len(e.call.arguments) <= KEPT_CHARS + 40 and SECRET not in e.call.arguments for e in told)
