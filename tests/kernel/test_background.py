"""``%%agent --background`` in a real kernel, against the real ``openai`` SDK and a loopback model server that holds
its answer until the test lets it go: the cell ends while the server holds it, the user's next cell runs before the
model answers, ``_agent`` holds the result after, the panel becomes the record in its own cell; a kernel tool asked
for during an awaiting cell waits for it; Stop and approvals work while no cell and while another cell runs; two
runs at once; headless runs stay in their cell; nothing lands in another cell; a kernel restart keeps transcripts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_client import Cell, KernelSession, agent_kernel, kernel_fixtures
from openai_server import TEST_KEY, Reply, ScriptedServer, responses_events

SETUP = f"""\
%autoawait True
import asyncio, os, time, ipywidgets
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE", "OPENAI_BASE_URL", "AGENTKERNEL_MODEL"):
    os.environ.pop(_name, None)
os.environ["OPENAI_API_KEY"] = {TEST_KEY!r}
%config AgentMagics.background = False
"""

session, kernel = kernel_fixtures("background", SETUP)

# What a background run's own cell may get after the cell ended; another cell gets none of it.
RUN_OUTPUT = ("display_data", "update_display_data", "stream", "comm_open", "comm_msg", "comm_close", "error")


class Held(list):
    """SSE events the server sends only once :attr:`release` is set: a model that holds its answer."""

    def __init__(self, events: list[str]):
        super().__init__(events)
        self.asked = threading.Event()
        self.release = threading.Event()

    def __iter__(self) -> Iterator[str]:
        self.asked.set()
        if self.release.wait(60):
            yield from super().__iter__()


def arrives(kernel: KernelSession, cell: Cell, found: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict:
    """Pump until one of ``cell``'s messages (after the cell ended too) satisfies ``found``."""
    deadline = time.monotonic() + timeout
    while True:
        for msg in cell.messages:
            if found(msg):
                return msg
        if time.monotonic() > deadline:
            raise TimeoutError(f"no such message for {cell.code[:60]!r}\n{cell.describe()}")
        kernel.pump(0.02)


def record_update(msg: dict[str, Any]) -> bool:
    """The panel's display updated to the run's record."""
    return msg["msg_type"] == "update_display_data" and str(msg["content"]["data"].get("text/plain", "")).startswith(
        "agent: ")


def button(kernel: KernelSession, cell: Cell, description: str) -> str:
    msg = arrives(kernel, cell, lambda m: m["msg_type"] == "comm_open" and
                  m["content"]["data"]["state"].get("description") == description)
    return msg["content"]["comm_id"]


def said(kernel: KernelSession, cell: Cell, words: str) -> None:
    """Wait until a widget update of ``cell`` holds ``words`` (its panel's status line)."""
    arrives(kernel, cell, lambda m: m["msg_type"] in ("comm_msg", "comm_open")
            and words in json.dumps(m["content"]["data"].get("state", {})))


def only_its_own(cell: Cell) -> None:
    """The cell holds no output of a background run: no display, update, widget or stream it did not make."""
    foreign = [m["msg_type"] for m in cell.messages if m["msg_type"] in RUN_OUTPUT]
    assert not foreign, f"{cell.code[:40]!r} got {foreign}\n{cell.describe()}"


def start(kernel: KernelSession, server: ScriptedServer, options: str = "", prompt: str = "question") -> Cell:
    cell = kernel.run(f"%%agent --background --base-url {server.url} -m small {options}\n{prompt}")
    assert cell.status == "ok", cell.describe()
    assert "goes on in the background" in cell.stdout, cell.describe()
    return cell


def number_of(cell: Cell) -> int:
    """The run number a background cell printed (``run 3 goes on in the background``)."""
    return int(cell.stdout.split("run ", 1)[1].split()[0])


def widgets_alive(kernel: KernelSession) -> int:
    return int(kernel.value("len(ipywidgets.widgets.widget._instances)"))


def test_the_cell_ends_while_the_model_holds_its_answer_and_the_next_cell_runs_before_it_answers(kernel):
    before = widgets_alive(kernel)
    held = Held(responses_events(["the ", "answer"]))
    with ScriptedServer(Reply(events=held)) as server:  # type: ignore[arg-type]
        started = start(kernel, server)
        assert held.asked.wait(30) and not held.release.is_set()  # the cell has ended; the model holds its answer
        listed = kernel.ok("%agent_runs")
        row = listed.stdout.splitlines()[number_of(started) - 1]
        assert row.startswith(f"run {number_of(started)} · cell [") and "running" in row, listed.describe()
        meanwhile = kernel.ok("x = 41 + 1")  # the user's next cell, before the model answers
        assert kernel.value("x") == 42 and not held.release.is_set()
        held.release.set()
        waited = kernel.ok("%agent_wait")
    assert "complete" in waited.stdout, waited.describe()
    assert kernel.value("_agent.answer") == "the answer" and kernel.value("_agent.status") == "complete"
    update = arrives(kernel, started, record_update)  # the panel became the record, in the starting cell
    assert "the answer" in update["content"]["data"]["text/plain"]
    assert widgets_alive(kernel) == before  # 0 widgets left
    only_its_own(meanwhile)
    assert [m["msg_type"] for m in waited.messages if m["msg_type"] in RUN_OUTPUT] == ["stream"]  # its own print


def test_a_kernel_tool_asked_for_during_an_awaiting_cell_waits_for_it_and_sees_what_it_set(kernel, tmp_path):
    flag = tmp_path / "go"
    held = Held(responses_events(calls=[("c1", "inspect_variable", '{"name": "stage"}')]))
    with ScriptedServer(Reply(events=held), Reply(responses_events(["done"]))) as server:  # type: ignore[arg-type]
        started = start(kernel, server, "--tools inspect_variable")
        busy = kernel.submit(f"stage = 'in the cell'\nwhile not os.path.exists({str(flag)!r}):\n"
                             "    await asyncio.sleep(0.02)\nstage = 'after the cell'")
        number = busy.wait_for(lambda m: m["msg_type"] == "execute_input")["content"]["execution_count"]
        held.release.set()  # the model asks for the variable while the cell awaits
        said(kernel, started, f"waiting for cell [{number}] to finish")
        flag.write_text("go")
        busy.wait(30)
        only_its_own(busy)
        kernel.ok("%agent_wait")
    outputs = kernel.value("[i['output'] for i in _agent.history if i.get('type') == 'function_call_output']")
    assert len(outputs) == 1 and "after the cell" in outputs[0], outputs


def test_stop_clicked_while_no_cell_runs_ends_the_run_within_a_second(kernel):
    held = Held(responses_events(["never sent"]))
    with ScriptedServer(Reply(events=held)) as server:  # type: ignore[arg-type]
        started = start(kernel, server)
        assert held.asked.wait(30)
        clicked = kernel.click(button(kernel, started, "Stop"))
        update = arrives(kernel, started, record_update)
        received = next(at for at, m in kernel.iopub[started.msg_id] if m is update)
        assert received - clicked < 1.0, received - clicked
        held.release.set()
    assert kernel.value("_agent.status") == "aborted"
    assert "Stop button" in kernel.value("_agent.detail")


def test_an_approval_clicked_while_another_cell_runs_and_the_call_runs_after_that_cell(kernel, tmp_path):
    flag = tmp_path / "go"
    with ScriptedServer(Reply(responses_events(calls=[("c1", "run_python", '{"code": "seen = stage"}')])),
                        Reply(responses_events(["done"]))) as server:
        started = start(kernel, server, "--tools run_python")
        approve = button(kernel, started, "Approve")
        busy = kernel.submit(f"stage = 'in the cell'\nwhile not os.path.exists({str(flag)!r}):\n"
                             "    await asyncio.sleep(0.02)\nstage = 'after the cell'")
        number = busy.wait_for(lambda m: m["msg_type"] == "execute_input")["content"]["execution_count"]
        kernel.click(approve)  # while the user's cell runs
        said(kernel, started, f"waiting for cell [{number}] to finish")  # approved, and queued behind the cell
        flag.write_text("go")
        busy.wait(30)
        kernel.ok("%agent_wait")
    assert kernel.value("seen") == "after the cell"
    assert kernel.value("_agent.status") == "complete"
    only_its_own(busy)


def test_two_background_runs_at_once_each_with_its_record_in_its_own_cell(kernel):
    first, second = Held(responses_events(["first answer"])), Held(responses_events(["second answer"]))
    with ScriptedServer(Reply(events=first)) as one, ScriptedServer(Reply(events=second)) as two:  # type: ignore[arg-type]
        a, b = start(kernel, one), start(kernel, two)
        assert first.asked.wait(30) and second.asked.wait(30)
        listed = kernel.ok("%agent_runs").stdout
        assert listed.count("running") == 2, listed
        second.release.set()
        kernel.ok(f"%agent_wait {number_of(b)}")
        assert "second answer" in arrives(kernel, b, record_update)["content"]["data"]["text/plain"]
        assert "running" in kernel.ok("%agent_runs").stdout.splitlines()[number_of(a) - 1]
        first.release.set()
        kernel.ok("%agent_wait")
    assert "first answer" in arrives(kernel, a, record_update)["content"]["data"]["text/plain"]
    assert [m for m in b.messages if record_update(m) and "first" in str(m["content"]["data"])] == []
    assert kernel.value("_agent.answer") == "first answer"  # the last to end


def test_the_kernel_interrupt_interrupts_the_users_cell_not_the_background_run(kernel):
    held = Held(responses_events(["still here"]))
    with ScriptedServer(Reply(events=held)) as server:  # type: ignore[arg-type]
        start(kernel, server)
        assert held.asked.wait(30)
        busy = kernel.submit("print('sleeping', flush=True)\ntime.sleep(30)")
        busy.wait_for(lambda m: m["msg_type"] == "stream")  # in the user's code
        kernel.interrupt()
        busy.wait(30)
        assert busy.errors and busy.errors[0]["ename"] == "KeyboardInterrupt", busy.describe()
        assert "running" in kernel.ok("%agent_runs").stdout
        held.release.set()
        kernel.ok("%agent_wait")
    assert kernel.value("_agent.answer") == "still here"


@pytest.mark.parametrize("how", ["nbclient", "CI", "console"])
def test_a_headless_background_run_runs_in_its_cell_saying_so(kernel, how):
    runs = kernel.ok("%agent_runs").stdout
    with ScriptedServer(Reply(responses_events(["in the cell"]))) as server:
        code = f"%%agent --background --base-url {server.url} -m small\nquestion"
        if how == "CI":
            kernel.ok("os.environ['CI'] = 'true'")
            cell = kernel.run(code)
            kernel.ok("os.environ.pop('CI')")
        elif how == "console":  # as jupyter console sends a cell: input, no cell id, no widgets
            cell = kernel.submit(code, console=True).wait(30)
        else:  # as nbclient (papermill, nbconvert, nbval) sends a cell: no input, no cell id
            cell = kernel.submit(code, console=True, allow_stdin=False).wait(30)
    assert cell.status == "ok", cell.describe()
    assert cell.stdout.count("runs in the foreground here") == 1, cell.describe()
    assert any("in the cell" in str(d.get("text/plain")) for d in cell.displays) or "in the cell" in cell.stdout, \
        cell.describe()
    assert kernel.value("_agent.answer") == "in the cell"
    assert kernel.ok("%agent_runs").stdout == runs  # no background run was started


def test_agent_stop_and_wait_name_runs_and_say_so_for_a_wrong_one(kernel):
    held = Held(responses_events(["never"]))
    with ScriptedServer(Reply(events=held)) as server:  # type: ignore[arg-type]
        number = number_of(start(kernel, server))
        assert held.asked.wait(30)
        wrong = kernel.run("%agent_stop 999")
        assert wrong.status == "error" and "no background run '999'" in wrong.stderr, wrong.describe()
        assert f"stopping run {number}" in kernel.ok(f"%agent_stop {number}").stdout
        kernel.ok(f"%agent_wait {number}")
        held.release.set()
    assert kernel.value("_agent.status") == "aborted" and "%agent_stop" in kernel.value("_agent.detail")


def test_a_kernel_restart_ends_the_runs_and_keeps_their_transcripts(tmp_path):
    held = Held(responses_events(["never"]))
    with agent_kernel(tmp_path) as ks, ScriptedServer(Reply(events=held)) as server:  # type: ignore[arg-type]
        ks.ok(SETUP)
        cell = ks.run(f"%%agent --background --base-url {server.url} -m small\nremember this question")
        assert cell.status == "ok" and held.asked.wait(30)
        ks.km.restart_kernel(now=True)
        held.release.set()
    [transcript] = list((tmp_path / "transcripts").glob("*.jsonl"))
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert lines[0]["event"] == "start"
    assert any("remember this question" in json.dumps(line) for line in lines)


def test_background_is_a_config_trait(kernel):
    with ScriptedServer(Reply(responses_events(["configured"]))) as server:
        kernel.ok("%config AgentMagics.background = True")
        cell = kernel.run(f"%%agent --base-url {server.url} -m small\nquestion")
        assert "goes on in the background" in cell.stdout, cell.describe()
        kernel.ok("%agent_wait")
    assert kernel.value("_agent.answer") == "configured"


def test_a_guard_stop_in_the_background_ends_agent_wait_with_its_error(kernel, tmp_path):
    """%agent_wait ends as the run's own cell would have: the repeated-call guard's error, named for it."""
    (Path(kernel.cwd) / "notes.txt").write_text("hello\n")
    kernel.ok("from agentkernel import Call, ScriptedModel\n"
              "looping = ScriptedModel([Call('read_file', {'path': 'notes.txt'})] * 5)")
    started = kernel.run("%%agent --background -m looping --tools read_file\nRead the notes.")
    assert started.status == "ok", started.describe()
    waited = kernel.run("%agent_wait")
    assert waited.errors and waited.errors[0]["ename"] == "RepeatedToolCall", waited.describe()
    assert kernel.value("_agent.status") == "repeated_tool_call"
    assert "repeated_tool_call" in arrives(kernel, started, record_update)["content"]["data"]["text/plain"]


def test_a_model_that_fails_in_the_background_leaves_its_record_and_no_widget(kernel):
    before = widgets_alive(kernel)
    failing = Reply(status=500, body={"error": {"message": "the model fell over"}}, headers={"x-should-retry": "false"})
    with ScriptedServer(failing) as server:
        started = start(kernel, server)
        waited = kernel.run("%agent_wait")
    assert waited.errors and "fell over" in waited.errors[0]["evalue"], waited.describe()  # as its cell would end
    assert kernel.value("_agent.status") == "fatal_error"
    assert "fatal_error" in arrives(kernel, started, record_update)["content"]["data"]["text/plain"]
    assert widgets_alive(kernel) == before


def test_agent_wait_not_alone_and_agent_runs_with_nothing_say_so_in_one_line(kernel):
    not_alone = kernel.ok("x = 1\n%agent_wait")
    assert "must be alone in its cell" in not_alone.stdout
    wrong = kernel.run("%agent_wait nonsense")
    assert wrong.status == "error" and "no background run 'nonsense'" in wrong.stderr, wrong.describe()
