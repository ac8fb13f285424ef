"""The live panel over long runs in a real kernel, driven over ZMQ with jupyter_client as a front end drives it.

What a front end receives must not grow with the run: older calls are folded into one HTML block, their widgets are
closed, and Stop still ends a run at once late in a long one. The figures (ms and bytes per round) are measured by
``benchmarks/panel.py``, not asserted here.
"""

from __future__ import annotations

import json
import re

from kernel_client import KernelSession, Message, kernel_fixtures
from timing import STOP_BOUND

from agentkernel.jupyter.panel import LIVE_ENTRIES

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
import asyncio, os, ipywidgets, agentkernel
os.environ.pop("CI", None)
from agentkernel import Call, ScriptedModel, Turn, tool
from ipywidgets.widgets.widget import _instances as _widgets

@tool
async def noop(i: int) -> str:
    "Do nothing, quickly."
    return "ok"

@tool(read_only=False)
def write_note(text: str) -> str:
    "Append a note (a side effect)."
    return "written"

def _writer(req):
    done = any(item["type"] == "function_call_output" for item in req.history)
    return "noted" if done else Call("write_note", {"text": "hi"})

@tool
async def tick(i: int) -> str:
    "Take a millisecond."
    await asyncio.sleep(0.001)
    return "ok"
"""


session, kernel = kernel_fixtures("panel_kernel", SETUP)


def data(msg: Message) -> str:
    return json.dumps(msg["content"].get("data", {}), ensure_ascii=False)


def comm_messages(cell, text: str) -> list[Message]:
    return [m for m in cell.of_type("comm_open", "comm_msg") if text in data(m)]


def test_a_long_run_folds_old_calls_and_leaves_few_widgets(kernel: KernelSession):
    n = 500
    kernel.ok(f"model = ScriptedModel([Call('noop', {{'i': i}}) for i in range({n})] + ['done'])\n"
              "_before = len(_widgets)")
    cell = kernel.run("%%agent -m model --tools noop\ngo", timeout=120)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.tool_calls") == n

    alive = kernel.value("len(_widgets) - _before")
    print(f"widget models left alive by a {n}-call run: {alive}")
    assert alive <= 50
    # The folded calls are in the panel's state: the last update of the fold block counts all of them.
    (last_fold, *_) = reversed(comm_messages(cell, "earlier entries folded"))
    counted = re.search(r"(\d+) earlier entries folded \((\d+) calls\)", data(last_fold))
    assert counted and counted.group(1) == counted.group(2), data(last_fold)
    folded = int(counted.group(1))  # the live window holds the final message and the newest calls
    assert n - LIVE_ENTRIES < folded <= n - LIVE_ENTRIES // 2 + 1
    assert f"noop(i={folded - 1}) · ok" in data(last_fold)
    # The newest call has its live section, finished.
    assert comm_messages(cell, f"noop(i={n - 1}) · ok")
    # Every widget message is bounded (no children list or fold block growing with the run).
    sizes = [len(data(m)) for m in cell.of_type("comm_open", "comm_msg")]
    print(f"widget messages: {len(sizes)}, largest {max(sizes)} characters")
    assert max(sizes) < 8000
    assert len(sizes) < n  # fewer widget messages than calls: updates are throttled, not per event


def test_stop_late_in_a_long_run_is_immediate(kernel: KernelSession):
    kernel.ok("endless = ScriptedModel(lambda request: Call('tick', {'i': len(request.history)}))")
    cell = kernel.submit("%%agent -m endless --tools tick\ngo on and on")
    stop = cell.wait_for_button("Stop")

    def late(msg: Message) -> bool:
        found = re.search(r"running · (\d+) rounds", data(msg))
        return found is not None and int(found.group(1)) >= 400

    cell.wait_for(late, timeout=60)
    clicked = kernel.click(stop)
    cell.wait(10)
    latency = cell.idle_at - clicked
    rounds = kernel.value("_agent.rounds")
    print(f"Stop after {rounds} rounds: idle {latency:.3f} s after the click")
    assert latency < STOP_BOUND
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.status") == "aborted" and rounds >= 400
    assert kernel.value("agentkernel.validate_history(_agent.history) or 'valid'") == "valid"
    assert comm_messages(cell, "aborted: stopped with the Stop button")


def test_a_call_shows_while_the_model_writes_it(kernel: KernelSession):
    kernel.ok("writer = ScriptedModel([Turn(calls=[Call('noop', {'i': 7})], delay=0.5), 'done'])")
    cell = kernel.run("%%agent -m writer --tools noop\ngo")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    (writing, *_) = comm_messages(cell, "noop(…) · writing · 0 characters")
    (finished, *_) = comm_messages(cell, "noop(i=7) · ok")
    # The section shown while the call was written is the one that becomes the call's section.
    assert writing["content"]["comm_id"] == finished["content"]["comm_id"]
    assert cell.messages.index(writing) < cell.messages.index(finished)


def widget_comms(cell) -> tuple[set[str], set[str]]:
    """The ids of the widget comms the cell's run opened, and of the comms it closed (from the iopub messages)."""
    opened = {m["content"]["comm_id"] for m in cell.of_type("comm_open")
              if m["content"].get("target_name") == "jupyter.widget"}
    return opened, {m["content"]["comm_id"] for m in cell.of_type("comm_close")}


def test_no_widget_of_a_finished_run_is_left_open_after_each_of_20_runs(kernel: KernelSession):
    """Whatever the ending (an answer, a budget, a guard's error, Stop, after an approval), the run's
    record replaces its panel and every widget the run opened is closed in the same cell."""
    kernel.ok("_start = len(_widgets)\n"
              "writer = ScriptedModel(_writer)\n"
              "def script(n):\n"
              "    return ScriptedModel([Turn(text='working', calls=[Call('noop', {'i': i})]) for i in range(n)]"
              " + ['**done**'])")
    kernel.ok("looping = ScriptedModel([Call('noop', {'i': 0})] * 6)\n"
              "endless = ScriptedModel(lambda request: Call('tick', {'i': len(request.history)}))")
    endings = []
    for run in range(20):
        if run % 5 == 4:  # an approval, answered
            cell = kernel.submit("%%agent -m writer --tools write_note\nnote it")
            kernel.click(cell.wait_for_button("Approve"))
            cell.wait(30)
        elif run % 5 == 2:  # Stop, while it runs
            cell = kernel.submit("%%agent -m endless --tools tick\ngo on")
            stop = cell.wait_for_button("Stop")
            cell.wait_for(lambda m: re.search(r"running · \d+ rounds", data(m)) is not None, timeout=30)
            kernel.click(stop)
            cell.wait(30)
        elif run % 5 == 1:  # a guard: the cell ends with an error
            cell = kernel.run("%%agent -m looping --tools noop\ngo", timeout=60)
            kernel.ok("looping = ScriptedModel([Call('noop', {'i': 0})] * 6)")
        else:
            budget = " --max-tool-calls 3" if run % 5 == 3 and run > 5 else ""
            cell = kernel.run(f"model = script({run % 7 + 1})\n_ = None", timeout=30)
            cell = kernel.run(f"%%agent -m model --tools noop{budget}\ngo", timeout=60)
        endings.append(kernel.value("_agent.status"))
        opened, closed = widget_comms(cell)
        assert opened, cell.describe()  # the panel was live...
        assert opened <= closed, f"run {run} left {len(opened - closed)} widgets open"  # ...and all of it is closed
        assert kernel.value("len(_widgets) - _start") == 0  # nor does the kernel hold one
        (update,) = cell.of_type("update_display_data")  # the panel's display emptied, the record below it
        assert update["content"]["data"] == {}
        assert not any("widget-view" in key for d in cell.displays[1:] for key in d)
    assert set(endings) == {"complete", "hit_tool_call_cap", "aborted", "repeated_tool_call"}


def test_the_status_line_says_waiting_for_approval_and_for_how_long(kernel: KernelSession):
    kernel.ok("writer = ScriptedModel(_writer)")
    cell = kernel.submit("%%agent -m writer --tools write_note\nnote it")
    approve = cell.wait_for_button("Approve")
    waiting = cell.wait_for(lambda m: re.search(r"waiting for approval \(\d+ s\) · 1 round", data(m)) is not None,
                            timeout=10)
    assert "waiting for approval: <code>write_note</code> has side effects" in json.dumps(
        [m["content"] for m in cell.of_type("comm_open")], ensure_ascii=False)  # the question says it too
    kernel.click(approve)
    cell.wait(30)
    assert cell.status == "ok" and kernel.value("_agent.status") == "complete", cell.describe()
    later = [m for m in cell.of_type("comm_msg") if cell.messages.index(m) > cell.messages.index(waiting)]
    assert any("running · 1 round" in data(m) or "complete · 2 rounds" in data(m) for m in later)
