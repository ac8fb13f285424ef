"""Fault injection for tools: whatever a tool, its arguments or an approver do, the run goes on.

Each test names the issue item it covers. Scripts that must end on their own (a tool that exits, a hung worker
thread) run as real subprocesses with a deadline, so a regression fails the test instead of hanging or ending the
test session.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import outputs, run_sync

from agentkernel import Call, Decision, LoopResult, ModelRequest, ScriptedModel, ToolCall, Turn, tool, validate_history
from agentkernel.text import normalize_arguments, pretty_arguments, short_arguments

REPO = Path(__file__).resolve().parents[2]


def run_guarded(prompt: str, **options: Any) -> LoopResult:
    """``run_sync``, but anything escaping the run fails the test rather than the session (KeyboardInterrupt would)."""
    try:
        return run_sync(prompt, **options)
    except BaseException as e:  # noqa: BLE001 - exactly what this fault test looks for
        pytest.fail(f"{type(e).__name__} escaped run(): {e!r}")


def run_script(code: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh Python with this worktree's package; fail the test if it has not ended in time."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the script was still running after {timeout} s; its output: {e.stdout!r} {e.stderr!r}")


# -- 1. a tool cannot end the process ----------------------------------------------------------------------------

def throw(error: BaseException) -> None:
    raise error


EXITS = {
    "sys.exit()": lambda: sys.exit(),
    "sys.exit(3)": lambda: sys.exit(3),
    "raise SystemExit": lambda: throw(SystemExit("bad usage")),
    "raise KeyboardInterrupt": lambda: throw(KeyboardInterrupt()),
}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("how", list(EXITS))
def test_a_tool_that_exits_gets_an_error_output_and_the_run_goes_on(how: str, use_async: bool):
    if use_async:
        @tool
        async def quit_now() -> str:
            """Tries to end the process."""
            EXITS[how]()
            return "unreachable"
    else:
        @tool
        def quit_now() -> str:
            """Tries to end the process."""
            EXITS[how]()
            return "unreachable"

    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    script = [[Call("quit_now"), Call("echo", {"text": "same round"})], Call("echo", {"text": "next round"}), "done"]
    result = run_guarded("go", model=ScriptedModel(script), tools=[quit_now, echo])
    assert result.status == "complete"
    first, beside, after = (o["output"] for o in outputs(result.history))
    expected = "error: KeyboardInterrupt" if "Keyboard" in how else "error: SystemExit("
    assert first.startswith(expected), first
    assert (beside, after) == ("same round", "next round")
    validate_history(result.history)


def test_a_script_whose_tools_call_exit_keeps_running():
    # `exit()` here is the site builtin a plain script has; argparse on bad input raises SystemExit(2) the same way.
    result = run_script("""
        import argparse, asyncio, sys
        from agentkernel import Call, ScriptedModel, run, tool

        @tool
        def cli(args: str) -> str:
            "Parse a command line."
            parser = argparse.ArgumentParser(prog="cli")
            parser.add_argument("--n", type=int, required=True)
            return str(parser.parse_args(args.split()).n)

        @tool
        def bye() -> str:
            "Calls the builtin exit()."
            exit(4)

        @tool
        async def interrupt() -> str:
            "Raises KeyboardInterrupt on the event loop's own thread."
            raise KeyboardInterrupt

        script = [[Call("cli", {"args": "--n x"}), Call("bye"), Call("interrupt")], "done"]
        result = asyncio.run(run("go", model=ScriptedModel(script), tools=[cli, bye, interrupt]))
        print(result.status)
        for item in result.history:
            if item["type"] == "function_call_output":
                print(item["output"])
        print("still alive")
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "complete"
    assert lines[1:4] == ["error: SystemExit(2): the tool tried to end the process",
                          "error: SystemExit(4): the tool tried to end the process",
                          "error: KeyboardInterrupt"]
    assert lines[-1] == "still alive"


def test_the_users_interrupt_still_interrupts_a_script():
    # asyncio.run turns the first SIGINT into cancelling the run: the loop records the abort and the script ends
    # with KeyboardInterrupt, even while a sync tool sleeps in its worker thread.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = textwrap.dedent("""
        import asyncio, time
        from agentkernel import Call, ScriptedModel, run, tool

        @tool
        def nap() -> str:
            "Sleeps."
            print("napping", flush=True)
            time.sleep(60)
            return "rested"

        asyncio.run(run("go", model=ScriptedModel([Call("nap"), "never"]), tools=[nap]))
    """)
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=REPO)
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "napping\n"
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=10)
        elapsed = time.monotonic() - sent
    finally:
        process.kill()
    print(f"script ended {elapsed:.2f} s after SIGINT")
    assert process.returncode != 0
    assert "KeyboardInterrupt" in stderr
    assert elapsed < 5


# -- 4. arguments nested too deeply ------------------------------------------------------------------------------

DEEP = '{"a": ' * 100_000 + "1" + "}" * 100_000
DEEP_LIST = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("arguments", [DEEP, DEEP_LIST, '{"path": ' + "[" * 600 + "]" * 600 + "}"],
                         ids=["object-100000", "array-100000", "path-600"])
def test_deeply_nested_arguments_become_the_calls_error_output(arguments: str):
    @tool
    def read(path: str) -> str:
        """Read."""
        return f"read {path}"

    script = [[Call("read", arguments), Call("no_such_tool", arguments), Call("read", {"path": "a"})], "done"]
    result = run_guarded("go", model=ScriptedModel(script), tools=[read])
    assert result.status == "complete"
    deep, unknown, fine = (o["output"] for o in outputs(result.history))
    assert deep.startswith("error: bad arguments for read: "), deep[:200]
    assert unknown == "error: unknown tool 'no_such_tool'; available: read"
    assert fine == "read a"
    validate_history(result.history)


def test_deeply_nested_arguments_are_safe_to_render_and_compare():
    call = ToolCall("c1", "read", DEEP)
    assert call.argument_error == "arguments are nested too deeply to read"
    assert call.normalized == DEEP  # compared as text by the guards
    assert normalize_arguments(DEEP) == DEEP
    assert short_arguments(DEEP).startswith('{"a": {"a":') and len(short_arguments(DEEP)) == 70
    assert pretty_arguments(DEEP) == DEEP
    medium = '{"a": ' * 400 + "1" + "}" * 400  # parses, but is too deep to indent
    assert pretty_arguments(medium).count('"a"') == 400


def test_a_run_with_deeply_nested_arguments_renders():
    from agentkernel.jupyter.render import render_html, render_text
    from agentkernel.listeners.timeline import Timeline

    record = Timeline()
    result = run_guarded("go", model=ScriptedModel([Call("read", DEEP), "done"]), tools=[], on_event=record)
    text, page = render_text(result, record), render_html(result, record)
    assert '▸ read({"a": {"a":' in text and "error: unknown tool 'read'" in text
    assert '{&quot;a&quot;: {&quot;a&quot;:' in page


def test_deeply_nested_arguments_repeated_trip_the_guard_not_the_run():
    script = [Call("read", DEEP)] * 4 + ["never"]
    result = run_guarded("go", model=ScriptedModel(script), tools=[])
    assert result.status in ("repeated_tool_call", "no_progress", "tool_failure")
    validate_history(result.history)


# -- 7. an abandoned sync tool does not keep a script alive ------------------------------------------------------

@pytest.mark.parametrize("cut_by", ["max_seconds", "tool timeout", "stop"])
def test_a_hung_sync_tool_does_not_keep_the_script_alive(cut_by: str):
    result = run_script(f"""
        import asyncio, threading, time
        from agentkernel import Call, Limits, ScriptedModel, StopSignal, run, tool

        cut_by = {cut_by!r}

        @tool(timeout=0.3 if cut_by == "tool timeout" else 60)
        def hang() -> str:
            "Never returns."
            threading.Event().wait()

        async def main():
            stop = StopSignal()
            if cut_by == "stop":
                asyncio.get_running_loop().call_later(0.3, stop.set)
            limits = Limits(max_seconds=0.3) if cut_by == "max_seconds" else Limits()
            model = ScriptedModel([Call("hang"), "gave up"])
            return await run("go", model=model, tools=[hang], limits=limits, stop=stop)

        start = time.monotonic()
        result = asyncio.run(main())
        print(result.status, f"{{time.monotonic() - start:.2f}}")
    """, timeout=15)
    assert result.returncode == 0, result.stderr
    status, seconds = result.stdout.split()
    assert status == {"max_seconds": "hit_wall_clock", "tool timeout": "complete", "stop": "aborted"}[cut_by]
    assert float(seconds) < 3  # run() returns on time (0.3 s + the cancelled work's grace); the process then ends


# -- 9. approvals are read strictly ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("verdict", "because"),
    [
        ("no", "the approver answered 'no', not True"),
        (1, "the approver answered 1, not True"),
        ("yes", "the approver answered 'yes', not True"),
        (None, "the approver answered None, not True"),
        (Decision("yes", for_run=True),  # type: ignore[arg-type]
         "the approver answered Decision(approve='yes', for_run=True, note='', reason='', asked='', by=None), "
         "not True"),
        (Decision(1),  # type: ignore[arg-type]
         "the approver answered Decision(approve=1, for_run=False, note='', reason='', asked='', by=None), not True"),
        (False, "the user denied it"),
    ],
)
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_only_the_bool_true_or_an_approving_decision_approves(verdict: object, because: str, use_async: bool):
    ran: list[str] = []

    @tool(read_only=False)
    def write(text: str) -> str:
        """Write."""
        ran.append(text)
        return "written"

    async def async_approve(call: ToolCall, t: object) -> object:
        return verdict

    approve = async_approve if use_async else (lambda call, t: verdict)
    result = run_guarded("go", model=ScriptedModel([Call("write", {"text": "x"}), "ok"]), tools=[write],
                         approve=approve)
    assert ran == []
    assert outputs(result.history)[0]["output"] == f"denied: write has side effects and {because}"
    assert result.status == "complete"


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_an_approver_that_raises_denies_with_its_error(use_async: bool):
    @tool(read_only=False)
    def write(text: str) -> str:
        """Write."""
        return "written"

    def broken(call: ToolCall, t: object) -> bool:
        raise RuntimeError("the approval widget is gone")

    async def broken_async(call: ToolCall, t: object) -> bool:
        await asyncio.sleep(0)
        return broken(call, t)

    script = [Call("write", {"text": "x"}), Call("write", {"text": "y"}), "ok"]
    result = run_guarded("go", model=ScriptedModel(script), tools=[write],
                         approve=broken_async if use_async else broken)
    assert result.status == "complete"
    expected = ("denied: write has side effects and the approval failed "
                "(RuntimeError: the approval widget is gone)")
    assert [o["output"] for o in outputs(result.history)] == [expected, expected]
    validate_history(result.history)


# -- 10. tool outputs are capped ---------------------------------------------------------------------------------

def test_a_50_mb_output_never_reaches_the_history_or_the_next_request():
    size = 50 * 1024 * 1024
    seen: list[int] = []

    @tool
    def flood() -> str:
        """Returns 50 MB."""
        return "x" * size

    def model(request: ModelRequest) -> Turn | Call | str:
        done = [item["output"] for item in request.history if item["type"] == "function_call_output"]
        seen.extend(len(o) for o in done)
        return "done" if done else Call("flood")

    result = run_guarded("go", model=ScriptedModel(model), tools=[flood])
    assert result.status == "complete"
    (output,) = (o["output"] for o in outputs(result.history))
    assert output.startswith("x" * 20_000)
    assert output.endswith(f"({size:,} characters in all)")
    assert len(output) < 20_100
    assert seen == [len(output)]


def test_output_limit_per_tool_and_for_errors_and_values():
    @tool(max_output_chars=100)
    def short_one() -> dict:
        """A big value, a small limit."""
        return {"rows": list(range(10_000))}

    @tool
    def loud_failure() -> str:
        """Fails with a huge message."""
        raise ValueError("y" * 1_000_000)

    @tool(max_output_chars=None)
    def unlimited() -> str:
        """No limit."""
        return "z" * 30_000

    script = [[Call("short_one"), Call("loud_failure"), Call("unlimited")], "done"]
    result = run_guarded("go", model=ScriptedModel(script), tools=[short_one, loud_failure, unlimited])
    small, failure, whole = (o["output"] for o in outputs(result.history))
    assert small.startswith('{"rows": [0, 1, 2') and len(small) < 200 and "characters in all" in small
    assert failure.startswith("error: ValueError: yyy") and len(failure) < 20_100
    assert failure.endswith(f"({len('error: ValueError: ') + 1_000_000:,} characters in all)")
    assert whole == "z" * 30_000


def test_a_tool_that_exits_leaves_the_kernel_alive(tmp_path: Path):
    from kernel_client import agent_kernel

    with agent_kernel(tmp_path) as session:
        pid = session.value("__import__('os').getpid()")
        session.ok("""\
import sys
from agentkernel import Call, ScriptedModel, tool

@tool
def quit_sync() -> str:
    "sys.exit() in a worker thread."
    sys.exit(1)

@tool
async def quit_async() -> str:
    "SystemExit on the kernel's own event loop."
    raise SystemExit(2)

@tool
def interrupt() -> str:
    "KeyboardInterrupt raised by the tool itself."
    raise KeyboardInterrupt

@tool
def bye() -> str:
    "IPython's exit(): in a kernel it asks the kernel to shut down rather than raising."
    exit()

@tool
async def bye_async() -> str:
    "quit(), on the kernel's own event loop."
    quit(3)

m = ScriptedModel([[Call(name) for name in ("quit_sync", "quit_async", "interrupt", "bye", "bye_async")], "still here"])
""")
        cell = session.run("%%agent -m m --tools quit_sync,quit_async,interrupt,bye,bye_async\ngo", timeout=30)
        assert cell.status == "ok" and not cell.errors, cell.describe()
        session.settle(0.5)  # the kernel died within 0.3 s of such a call before
        assert session.km.is_alive()
        assert session.value("__import__('os').getpid()") == pid
        assert session.value("_agent.status") == "complete"
        assert session.value("[i['output'] for i in _agent.history if i['type'] == 'function_call_output']") == [
            "error: SystemExit(1): the tool tried to end the process",
            "error: SystemExit(2): the tool tried to end the process",
            "error: KeyboardInterrupt",
            "error: SystemExit(None): the tool tried to end the process",
            "error: SystemExit(3): the tool tried to end the process",
        ]
        # After the run `exit` is IPython's again (and a later cell still works).
        assert session.value("exit is get_ipython().exiter and quit is get_ipython().exiter") is True
        assert session.ok("print(6 * 7)").stdout == "42\n"
        # The same with %autoawait off, where the loop runs in a worker thread.
        session.ok("%autoawait False\nm = ScriptedModel([Call('bye'), 'still here'])")
        cell = session.run("%%agent -m m --tools bye\ngo", timeout=30)
        assert cell.status == "ok" and not cell.errors, cell.describe()
        session.settle(0.5)
        assert session.value("__import__('os').getpid()") == pid
        exited = "error: SystemExit(None): the tool tried to end the process"
        assert session.value("_agent.history[-2]['output']") == exited
