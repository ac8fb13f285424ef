"""``%%agent --context-window N`` in a real kernel: a long run compacts its context instead of dying at the window.

Driven over ZMQ with jupyter_client like tests/kernel/test_magic_kernel.py. The panel is read the way a front end
reads it: each widget's state is rebuilt from its ``comm_open`` and the ``update`` comm messages that follow it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from kernel_client import Cell, KernelSession, kernel_fixtures

SETUP = """\
%reset -f
import json
from agentkernel import Call, ScriptedModel, tool

def chunk(n):
    return "\\n".join(f"chunk {n:3}, line {i:2}: the quick brown fox jumps over the lazy dog" for i in range(24))

@tool
def read_chunk(n: int) -> str:
    "Read chunk n of the log."
    return chunk(n)

def reader(request):
    seen = [json.loads(i["arguments"])["n"] for i in request.history if i["type"] == "function_call"]
    if not seen:
        return Call("read_chunk", {"n": 0})
    return Call("read_chunk", {"n": max(seen) + 1}) if max(seen) < 59 else "Read all 60."

model = ScriptedModel(reader)
"""

LONG_RUN = "%%agent -m model --tools read_chunk{options}\nRead chunks 0 to 59."


session, kernel = kernel_fixtures("magic_context", SETUP)


def widget_states(cell: Cell) -> dict[str, dict[str, Any]]:
    """Every widget the cell made, by comm id: its state as last updated."""
    states: dict[str, dict[str, Any]] = {}
    for msg in cell.of_type("comm_open", "comm_msg"):
        content = msg["content"]
        data = content.get("data", {})
        if msg["msg_type"] == "comm_open":
            states[content["comm_id"]] = dict(data.get("state", {}))
        elif data.get("method") in ("update", "echo_update") and content["comm_id"] in states:
            states[content["comm_id"]].update(data.get("state", {}))
    return states


def context_bar(cell: Cell) -> tuple[dict[str, Any], dict[str, Any]]:
    """The panel's context bar: its FloatProgress and its Label, the children of one HBox."""
    states = widget_states(cell)
    bars = [key for key, s in states.items()
            if s.get("_model_name") == "FloatProgressModel" and s.get("description") == "context"]
    assert len(bars) == 1, f"{len(bars)} context bars"
    (box,) = [s for s in states.values()
              if s.get("_model_name") == "HBoxModel" and s.get("children", [None])[0] == f"IPY_MODEL_{bars[0]}"]
    label = states[box["children"][1].removeprefix("IPY_MODEL_")]
    assert label["_model_name"] == "LabelModel"
    return states[bars[0]], label


def texts(cell: Cell) -> str:
    """Every string value the cell's widgets held, one per line (to look for what the panel showed)."""
    return "\n".join(str(s.get("value")) for m in cell.of_type("comm_open", "comm_msg")
                     for s in [m["content"].get("data", {}).get("state", {})] if isinstance(s.get("value"), str))


def static_text(cell: Cell) -> str:
    (bundle,) = cell.records
    return bundle["text/plain"]


def assert_history_whole(kernel: KernelSession, n: int = 60) -> None:
    assert kernel.value("[i['output'] for i in _agent.history if i['type'] == 'function_call_output']"
                        f" == [chunk(n) for n in range({n})]") is True
    assert kernel.value("__import__('agentkernel').validate_history(_agent.history) or 'valid'") == "valid"


def test_a_long_run_compacts_keeps_every_output_and_shows_it(kernel: KernelSession):
    cell = kernel.run(LONG_RUN.format(options=" --context-window 4096"), timeout=120)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.status") == "complete"
    compactions = kernel.value("_agent.compactions")
    assert compactions >= 3, compactions  # 60 outputs of 1.5 KB are ~24,000 tokens: several compactions
    assert_history_whole(kernel)

    bar, label = context_bar(cell)
    assert bar["max"] == 4096.0 and 0 < bar["value"] <= bar["max"]
    shown = re.fullmatch(r"(\d[\d,]*) / (\d[\d,]*)", label["value"])
    assert shown, label["value"]
    fill, window = shown.groups()
    assert window == "4,096" and min(int(fill.replace(",", "")), 4096) == round(bar["value"])
    # The panel's compaction entries: live ("⟲ context compacted ..."), or among the folded entries' titles.
    assert "context compacted (high water): " in texts(cell)
    # The static rendering: one line per compaction, and the count in the headline.
    rendering = static_text(cell)
    lines = [line for line in rendering.splitlines() if line.startswith("⟲ context compacted (high water): ")]
    assert len(lines) == compactions, rendering[:2000]
    assert re.match(r"⟲ context compacted \(high water\): [\d,]+ -> [\d,]+ tokens, \d+ outputs elided", lines[0])
    assert rendering.splitlines()[0].endswith(f" · {compactions} compactions")


def test_without_a_window_nothing_is_compacted_and_there_is_no_context_bar(kernel: KernelSession):
    cell = kernel.run(LONG_RUN.format(options=""), timeout=120)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("(_agent.status, _agent.compactions)") == ["complete", 0]
    assert not [s for s in widget_states(cell).values() if s.get("description") == "context"]
    assert "⟲" not in static_text(cell)


def test_config_context_window_applies_to_later_cells(kernel: KernelSession):
    try:
        kernel.ok("%config AgentMagics.context_window = 5000")
        cell = kernel.run(LONG_RUN.format(options=""), timeout=120)
        assert cell.status == "ok" and not cell.errors, cell.describe()
        assert kernel.value("_agent.compactions") >= 2
        assert context_bar(cell)[1]["value"].endswith(" / 5,000")
        assert_history_whole(kernel)
        # The command line wins over %config.
        cell = kernel.run(LONG_RUN.format(options=" --context-window 8000"), timeout=120)
        assert cell.status == "ok" and context_bar(cell)[1]["value"].endswith(" / 8,000"), cell.describe()
    finally:
        kernel.ok("%config AgentMagics.context_window = 0")


def test_a_prompt_that_can_never_fit_ends_context_overflow(kernel: KernelSession):
    kernel.ok("big = 'word ' * 8000")
    cell = kernel.run("%%agent -m model --tools read_chunk --context-window 2000\nCheck this: {big}")
    assert cell.status == "error"
    (error,) = cell.errors
    assert error["ename"] == "ContextOverflow", cell.describe()
    assert error["evalue"].startswith("CONTEXT_OVERFLOW: even compacted, the request needs about "), error["evalue"]
    assert "2,000-token window" in error["evalue"]
    traceback = "\n".join(error["traceback"])
    assert "agentkernel/" not in traceback and 'File "' not in traceback  # no internal frames
    assert kernel.value("(_agent.status, _agent.rounds, model.requests)") == ["context_overflow", 0, 0]
    assert "CONTEXT_OVERFLOW" in static_text(cell)


@pytest.mark.parametrize("value, message", [
    ("-5", "argument --context-window: must be 0 or more, not '-5'"),
    ("x", "argument --context-window: invalid int value: 'x'"),
])
def test_a_bad_context_window_is_a_usage_error_and_the_kernel_goes_on(kernel: KernelSession, value: str,
                                                                       message: str):
    cell = kernel.run(f"%%agent -m model --tools read_chunk --context-window {value}\nRead.")
    assert cell.status == "error"
    shown = cell.stderr + "".join(e["evalue"] for e in cell.errors)
    assert "UsageError" in shown and message in shown, cell.describe()
    assert not cell.displays  # no panel for a cell that never ran
    assert kernel.value("model.requests") == 0
    kernel.ok("%%agent -m model --tools read_chunk --context-window 4096\nRead chunks 0 to 59.", timeout=120)
    assert kernel.value("_agent.status") == "complete"
