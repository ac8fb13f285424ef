"""A ``%%agent`` cell's life as plain functions (``jupyter/cell.py``) and the kernel's shared state, with a fake shell
and no kernel: the options and prompt parsed, a run started, played and finished, ``_agent`` stored on every road
out, a failed start recorded, and the panel's widgets closed however the run ends."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from IPython.core.error import UsageError
from ipywidgets.widgets.widget import _instances as alive_widgets

from agentkernel import Call, LoopResult, ScriptedModel, tool
from agentkernel.jupyter import cell
from agentkernel.jupyter.errors import AgentConfigError, AgentStop
from agentkernel.jupyter.kernel_state import KernelState
from agentkernel.jupyter.magics import AgentMagics
from agentkernel.jupyter.options import OPTIONS


class Settings:
    """The ``%config AgentMagics`` traits, as plain attributes at their defaults."""

    def __init__(self, **configured: Any):
        for option in OPTIONS:
            if option.spec.trait:
                setattr(self, option.name, None)
        self.expand = True
        self.transcripts = ""  # no transcript files from a unit test
        self.__dict__.update(configured)


class FakeShell:
    """What the cell functions use of an IPython shell: its namespace, ``var_expand``, the exiter, next input."""

    def __init__(self, **namespace: Any):
        self.user_ns: dict[str, Any] = dict(namespace)
        self.user_ns_hidden: dict[str, Any] = {}
        self.autoawait = True
        self.exiter = object()
        self.next_inputs: list[str] = []
        self.execution_count = 1

    def var_expand(self, text: str, depth: int = 0) -> str:
        return text.replace("$who", str(self.user_ns.get("who", "$who")))

    def set_next_input(self, text: str, replace: bool = False) -> None:
        self.next_inputs.append(text)


def kernel_state(shell: FakeShell | None = None, **configured: Any) -> KernelState:
    return KernelState(shell or FakeShell(), Settings(**configured), AgentMagics.agent.parser)


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


def test_parse_takes_options_from_the_line_then_config_and_the_prompt_from_the_body() -> None:
    state = kernel_state(max_iterations=7)
    options, prompt = cell.parse(state, "--max-tool-calls 3", "  say hi  \n")
    assert (options.max_tool_calls, options.max_iterations, prompt) == (3, 7, "say hi")
    options, prompt = cell.parse(state, "--max-iterations 2 say $who", None)  # one-line %agent
    assert (options.max_iterations, prompt) == (2, "say $who")  # the prompt is expanded later, by prepare


def test_parse_expands_the_option_line_unless_told_not_to() -> None:
    state = kernel_state(FakeShell(who="m"))
    assert cell.parse(state, "-m $who", "x")[0].model == "m"
    assert cell.parse(state, "--no-expand -m $who", "x")[0].model == "$who"
    assert cell.parse(kernel_state(FakeShell(who="m"), expand=False), "-m $who", "x")[0].model == "$who"


def test_a_word_after_the_options_of_a_cell_is_a_usage_error_with_the_usage() -> None:
    with pytest.raises(UsageError) as raised:
        cell.parse(kernel_state(), "--max-iterations 2 stray", "the prompt")
    assert "'stray' is not an option" in str(raised.value) and "%%agent? lists the options" in str(raised.value)


def test_a_cell_that_cannot_start_leaves_a_fatal_error_and_keeps_the_previous_history() -> None:
    previous = LoopResult("complete", "hi", [{"type": "message", "role": "user", "content": "x"}])
    shell = FakeShell(_agent=previous, not_a_model=42)
    with pytest.raises(AgentConfigError, match="not a model"):
        asyncio.run(cell.run_awaited(kernel_state(shell), "-m not_a_model", "go"))
    result = shell.user_ns["_agent"]
    assert (result.status, result.history) == ("fatal_error", previous.history)
    assert "not a model" in result.detail and "usage:" not in result.detail


@pytest.mark.parametrize(("line", "error"), [("--record a.json --replay b.json", UsageError),
                                             ("--out 1x", AgentConfigError), ("--text-repeats 1", AgentConfigError)])
def test_unusable_options_fail_before_the_run_starts(line: str, error: type[Exception]) -> None:
    shell = FakeShell(m=ScriptedModel(["never"]))
    with pytest.raises(error):
        asyncio.run(cell.run_awaited(kernel_state(shell), f"-m m {line}", "go"))
    assert shell.user_ns["_agent"].status == "fatal_error"
    assert shell.user_ns["m"].requests == 0  # the model was never asked


def test_an_empty_prompt_is_a_usage_error() -> None:
    shell = FakeShell(m=ScriptedModel(["never"]))
    with pytest.raises(UsageError, match="prompt is empty"):
        asyncio.run(cell.run_awaited(kernel_state(shell), "-m m", "   \n"))


def widgets_of(run: cell.CellRun) -> set[str]:
    return {model_id for model_id, widget in alive_widgets.items() if widget is run.panel.widget}


class Displays:
    """``IPython.display.display`` as the cell functions call it, recorded: each bundle, and each update of a
    display with an id."""

    def __init__(self) -> None:
        self.shown: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []

    def __call__(self, bundle: dict[str, Any], raw: bool = False, display_id: bool = False) -> Any:
        self.shown.append(bundle)
        return self if display_id else None

    def update(self, bundle: dict[str, Any], raw: bool = False) -> None:
        self.updates.append(bundle)


@pytest.fixture
def displays(monkeypatch: pytest.MonkeyPatch) -> Displays:
    recorded = Displays()
    monkeypatch.setattr(cell, "display", recorded)
    return recorded


def test_an_awaited_cell_stores_the_result_in_agent_and_out_and_closes_its_panel(displays: Displays) -> None:
    shell = FakeShell(m=ScriptedModel([Call("ping"), "done"]), ping=ping)
    state = kernel_state(shell)
    runs: list[cell.CellRun] = []

    async def cell_life() -> None:
        run = await cell.start(state, "-m m --tools ping --out answer", "go")
        runs.append(run)
        assert run.shown is displays and widgets_of(run)  # the live panel is shown while the run plays
        await cell.play(state, run)
        cell.finish(state, run)

    asyncio.run(cell_life())
    result = shell.user_ns["_agent"]
    assert isinstance(result, cell.CellResult) and result.status == "complete" and result.answer == "done"
    assert shell.user_ns["answer"] is result and result.tool_calls == 1
    assert runs[0].shown is None and not widgets_of(runs[0])  # the panel's display emptied, its widgets closed
    assert displays.updates == [cell.PANEL_LEFT] == [{}]  # left with no data: shown as nothing
    panel, record = displays.shown[:2]
    assert set(panel) == {cell.WIDGET_VIEW} and record["text/plain"].startswith("agent: complete")


def test_a_budget_stop_ends_the_cell_with_its_error_and_still_stores_the_result() -> None:
    shell = FakeShell(m=ScriptedModel([Call("ping")] * 5), ping=ping)
    with pytest.raises(AgentStop) as raised:
        asyncio.run(cell.run_awaited(kernel_state(shell), "-m m --tools ping --max-tool-calls 1", "go"))
    assert str(raised.value).startswith("HIT_TOOL_CALL_CAP")
    assert shell.user_ns["_agent"].status == "hit_tool_call_cap"


def test_a_loop_that_fails_leaves_no_live_panel_and_no_result(displays: Displays) -> None:
    class Broken:
        async def stream(self, request: Any) -> Any:
            raise SystemExit("the model's process ended")  # a BaseException the loop does not turn into a result
            yield  # pragma: no cover

    shell = FakeShell(m=Broken())
    state = kernel_state(shell)
    runs: list[cell.CellRun] = []

    async def cell_life() -> None:
        run = await cell.start(state, "-m m", "go")
        runs.append(run)
        await cell.play(state, run)

    with pytest.raises(SystemExit):
        asyncio.run(cell_life())
    assert runs[0].shown is None and not widgets_of(runs[0])
    assert "_agent" not in shell.user_ns
    assert displays.updates == [cell.PANEL_LEFT] and len(displays.shown) == 1  # no record


def test_exit_is_refused_during_the_run_and_restored_after() -> None:
    shell = FakeShell(m=ScriptedModel(["done"]))
    shell.user_ns["exit"] = shell.exiter
    seen: list[object] = []

    async def watch(state: KernelState) -> None:
        run = await cell.start(state, "-m m", "go")
        original = run.loop.run

        async def spy(prompt: str) -> Any:
            seen.append(shell.user_ns["exit"])
            return await original(prompt)

        run.loop.run = spy  # type: ignore[method-assign]
        await cell.play(state, run)

    asyncio.run(watch(kernel_state(shell)))
    assert seen == [sys.exit] and shell.user_ns["exit"] is shell.exiter


def test_the_blocking_fallback_runs_the_same_cell_and_refuses_mcp(tmp_path: Any) -> None:
    shell = FakeShell(m=ScriptedModel(["done"]))
    cell.run_blocking(kernel_state(shell), "-m m", "go")
    assert shell.user_ns["_agent"].status == "complete"
    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {"never": {"command": "never-started"}}}')
    with pytest.raises(AgentConfigError, match="must be\\s+awaited"):
        cell.run_blocking(kernel_state(shell), f"-m m --mcp-config {config} --mcp never", "go")
    assert shell.user_ns["_agent"].status == "fatal_error"


def test_notes_are_said_once_per_kernel(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    state = kernel_state()
    state.note("a skill is malformed")
    state.note("a skill is malformed")
    monkeypatch.delenv("AK_TEST_UNSET", raising=False)
    state.note_short(["AK_TEST_UNSET"])
    state.note_short(["AK_TEST_UNSET"])
    monkeypatch.setenv("AK_TEST_UNSET", "x")  # a new value: said again
    state.note_short(["AK_TEST_UNSET"])
    out = capsys.readouterr().out.splitlines()
    assert out.count("agentkernel: a skill is malformed") == 1
    assert [line.split(", which ")[1] for line in out[1:]] == [
        "is not set: it is not treated as a secret", "is shorter than 8 characters: it is not treated as a secret"]
