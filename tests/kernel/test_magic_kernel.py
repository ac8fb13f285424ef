"""``%%agent`` in a real kernel, driven over ZMQ with jupyter_client the way a notebook front end drives it.

One kernel serves the whole module (starting one takes seconds); each test starts from a fresh user namespace
(``%reset -f``), autoawait on, and none of the agent environment variables set, then sets what it needs itself.
The kernel's working directory and ``AGENTKERNEL_TRANSCRIPTS`` are temporary directories.

Clicks are the ipywidgets 8 messages a browser sends: a ``comm_msg`` on the shell channel with
``{"method": "custom", "content": {"event": "click"}}`` for the comm id announced in the button's ``comm_open``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kernel_client import Cell, KernelSession, agent_kernel, kernel_env
from timing import STOP_BOUND

from agentkernel.jupyter.cell import PANEL_LEFT, WIDGET_VIEW

INTERRUPT_BOUND = 2.0

RESET = """\
%reset -f
%autoawait True
import os, time
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTKERNEL_MODEL"):
    os.environ.pop(_name, None)
del _name
import agentkernel
from agentkernel import Call, ScriptedModel, Turn, tool
"""

SLOW_MODELS = """\
slow_stream = ScriptedModel(lambda req: Turn(text="word " * 200, delay=0.05))

@tool
def nap(s: float) -> str:
    "Sleep s seconds in a worker thread."
    time.sleep(s)
    return "rested"

slow_tool = ScriptedModel([Call("nap", {"s": 5}), "rested well"])
"""

WRITER = """\
notes = []
seen_outputs = []

@tool(read_only=False)
def write_note(text: str) -> str:
    "Append a note (a side effect)."
    notes.append(text)
    return "written"

def _writer(req):
    outputs = [item["output"] for item in req.history if item["type"] == "function_call_output"]
    if not outputs:
        return Call("write_note", {"text": "hi"})
    seen_outputs.extend(outputs)
    return "noted"

writer = ScriptedModel(_writer)
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("magic_kernel"), {"x.txt": "hello"}) as ks:
        yield ks


@pytest.fixture
def kernel(session: KernelSession) -> KernelSession:
    """The module's kernel with a fresh namespace, autoawait on and no CI / API variables in its environment."""
    session.ok(RESET)
    return session


def static_rendering(cell: Cell) -> dict:
    """The run's static rendering: the display bundle of its record (HTML and plain text)."""
    (bundle,) = cell.records
    return bundle


def assert_clean_traceback(error: dict) -> None:
    """An error output that shows no stack frames from inside the package (nor any other)."""
    text = "\n".join(error["traceback"])
    assert "agentkernel/" not in text and 'File "' not in text and "Traceback" not in text, text


def assert_aborted_with_valid_history(kernel: KernelSession) -> None:
    assert kernel.value("_agent.status") == "aborted"
    assert kernel.value("agentkernel.validate_history(_agent.history) or 'valid'") == "valid"


# -- a complete run ----------------------------------------------------------------------------------------------


def test_agent_cell_completes_with_panel_and_static_rendering(kernel: KernelSession):
    kernel.ok("m = ScriptedModel([Call('read_file', {'path': 'x.txt'}), 'It says **hello**.'])")
    cell = kernel.run("%%agent -m m --out res\nWhat is in x.txt?")
    assert cell.status == "ok" and not cell.errors, cell.describe()

    panel, static = cell.displays  # the panel first (shown as the cell starts), then the static rendering
    assert set(panel) == {WIDGET_VIEW}  # no text/plain: nbval has nothing of it to compare
    assert "<details>" in static["text/html"] and "read_file" in static["text/html"]
    headline, *transcript = static["text/plain"].splitlines()
    assert re.fullmatch(r"agent: complete · 2 rounds · 1 tool call · [\d,]+ in · [\d,]+ out · cost unknown",
                        headline), headline
    assert transcript == ['▸ read_file(path="x.txt") · ok', "  │ hello", "It says **hello**."]
    assert WIDGET_VIEW not in static  # the record holds no widget view: it reads the same with no kernel
    # The panel's display is emptied in place (so a saved notebook holds no view of a dead widget) ...
    (update,) = cell.of_type("update_display_data")
    shown = cell.of_type("display_data")[0]["content"]["transient"]["display_id"]
    assert update["content"]["transient"]["display_id"] == shown and update["content"]["data"] == PANEL_LEFT == {}
    # ... and every widget the run opened is closed once its record is shown.
    widgets = [m for m in cell.of_type("comm_open") if m["content"].get("target_name") == "jupyter.widget"]
    opened = {m["content"]["comm_id"] for m in widgets}
    closed = {m["content"]["comm_id"] for m in cell.of_type("comm_close")}
    assert opened and opened <= closed
    assert cell.messages.index(update) > cell.messages.index(cell.of_type("display_data")[1])
    buttons = [m for m in widgets if m["content"]["data"]["state"].get("description") == "Stop"]
    assert len(buttons) == 1
    accordions = [m for m in widgets if m["content"]["data"]["state"].get("_model_name") == "AccordionModel"]
    assert len(accordions) == 1  # one collapsible section per tool call

    assert kernel.value("_agent.status") == "complete"
    assert kernel.value("res is _agent") is True
    assert kernel.value("_agent.answer") == "It says **hello**."
    transcript = Path(kernel.value("_agent.transcript"))
    assert transcript.parent == Path(kernel.env["AGENTKERNEL_TRANSCRIPTS"]) and transcript.exists()


def test_one_line_agent_magic(kernel: KernelSession):
    kernel.ok("m = ScriptedModel(['It says hello.'])")
    # A prompt ending in "name?" must not be taken for IPython's help syntax (pinfo on "x.txt").
    cell = kernel.run("%agent -m m what's in x.txt?")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert [set(d) for d in cell.displays][0] == {WIDGET_VIEW}
    assert kernel.value("_agent.status") == "complete"
    assert kernel.value("_agent.history[0]") == {"type": "message", "role": "user",
                                                 "content": "what's in x.txt?"}


# -- Stop and interrupt ------------------------------------------------------------------------------------------


def _streaming(msg: dict) -> bool:
    return msg["msg_type"] == "comm_msg" and "word word" in json.dumps(msg["content"].get("data", {}))


def _tool_running(msg: dict) -> bool:
    return (msg["msg_type"] in ("comm_open", "comm_msg")
            and "nap(s=5) · running" in json.dumps(msg["content"].get("data", {}), ensure_ascii=False))


@pytest.mark.parametrize("model, busy", [("slow_stream", _streaming), ("slow_tool", _tool_running)],
                         ids=["slow_stream", "slow_tool"])
def test_stop_button_aborts_within_bound_and_next_cell_runs(kernel: KernelSession, model: str, busy):
    kernel.ok(SLOW_MODELS)
    cell = kernel.submit(f"%%agent -m {model} --tools nap\ngo")
    stop = cell.wait_for_button("Stop")
    cell.wait_for(busy)  # mid-stream / mid-tool
    queued = kernel.submit("print('next cell sees', _agent.status)")  # queued behind the busy cell
    clicked = kernel.click(stop)
    cell.wait(10)
    latency = cell.idle_at - clicked
    print(f"Stop ({model}): idle {latency:.3f} s after the click")
    assert latency < STOP_BOUND, f"cell went idle {latency:.3f} s after the Stop click"

    assert cell.status == "ok" and not cell.errors and not cell.stderr, cell.describe()
    assert static_rendering(cell)["text/plain"].startswith("agent: aborted")
    assert queued.wait().status == "ok" and queued.stdout == "next cell sees aborted\n", queued.describe()
    assert_aborted_with_valid_history(kernel)
    assert kernel.value("_agent.detail") == "stopped with the Stop button"
    if model == "slow_tool":  # the abandoned call is answered in the history
        assert kernel.value("_agent.history[-1]['output']").startswith("aborted")


def test_interrupt_aborts_cleanly_and_aborts_queued_cells(kernel: KernelSession):
    kernel.ok(SLOW_MODELS)
    cell = kernel.submit("%%agent -m slow_stream\ngo")
    cell.wait_for(_streaming)
    queued = kernel.submit("print('should not run')")
    interrupted = kernel.interrupt()
    cell.wait(10)
    latency = cell.idle_at - interrupted
    print(f"interrupt (awaited cell): idle {latency:.3f} s after interrupt_kernel()")
    assert latency < INTERRUPT_BOUND

    assert cell.status == "error"
    (error,) = cell.errors
    assert error["ename"] == "KeyboardInterrupt", cell.describe()
    assert not any("agentkernel" in line for line in error["traceback"]), error["traceback"]  # no internal frames
    assert static_rendering(cell)["text/plain"].startswith("agent: aborted")  # rendered before the error
    assert queued.wait().status == "aborted" and queued.stdout == "", queued.describe()
    assert_aborted_with_valid_history(kernel)
    assert kernel.value("_agent.detail") == "interrupted by the kernel interrupt"


# -- guard trips are error cells ---------------------------------------------------------------------------------


def test_repeated_tool_call_is_an_error_cell(kernel: KernelSession):
    kernel.ok("loop = ScriptedModel([Call('read_file', {'path': 'x.txt'})] * 5)")
    cell = kernel.run("%%agent -m loop\nread it again and again")
    assert cell.status == "error"
    (error,) = cell.errors
    assert error["ename"] == "RepeatedToolCall"
    assert error["evalue"].startswith("REPEATED_TOOL_CALL: read_file"), error["evalue"]
    # Said once, on one line: the detail, the counts and where the partial result is.
    assert len(error["traceback"]) == 1 and error["evalue"].count("returned the same output") == 1
    assert error["evalue"].endswith("(after 3 rounds and 3 tool calls; the partial result is in _agent)")
    assert_clean_traceback(error)
    assert "REPEATED_TOOL_CALL" in static_rendering(cell)["text/plain"]  # the panel/transcript come first
    assert kernel.value("_agent.status") == "repeated_tool_call"
    assert len(kernel.value("_agent.partial_findings")) == 3
    assert kernel.value("agentkernel.validate_history(_agent.history) or 'valid'") == "valid"


def test_iteration_budget_is_an_error_cell_with_partial_findings(kernel: KernelSession):
    kernel.ok("busy = ScriptedModel([Call('read_file', {'path': 'x.txt'}), Call('list_dir', {'path': '.'}),"
              " 'never reached'])")
    cell = kernel.run("%%agent -m busy --max-iterations 2 --out partial\nlook around")
    assert cell.status == "error"
    (error,) = cell.errors
    assert error["ename"] == "HitIterationCap"
    assert error["evalue"].startswith("HIT_ITERATION_CAP"), error["evalue"]
    assert_clean_traceback(error)
    assert kernel.value("_agent.status") == "hit_iteration_cap"
    assert kernel.value("partial is _agent") is True
    findings = kernel.value("_agent.partial_findings")
    assert [f["tool"] for f in findings] == ["read_file", "list_dir"]
    assert findings[0]["output"] == "hello"
    # The panel has a progress bar for the budget that was set (and none for those that were not).
    bars = [m["content"]["data"]["state"] for m in cell.of_type("comm_open")
            if m["content"]["data"]["state"].get("_model_name") == "FloatProgressModel"]
    assert [(b["description"], b["max"]) for b in bars] == [("rounds", 2.0)]


# -- options -----------------------------------------------------------------------------------------------------


def test_config_sets_defaults(kernel: KernelSession):
    kernel.ok("busy = ScriptedModel([Call('read_file', {'path': 'x.txt'}), 'never reached'])")
    kernel.ok("%config AgentMagics.max_iterations = 1")
    try:
        cell = kernel.run("%%agent -m busy\nlook")
        assert [e["ename"] for e in cell.errors] == ["HitIterationCap"], cell.describe()
        assert kernel.value("_agent.rounds") == 1
    finally:
        kernel.ok("%config AgentMagics.max_iterations = 0")


def test_continue_appends_the_prompt_to_the_previous_history(kernel: KernelSession):
    kernel.ok("first = ScriptedModel(['First answer.'])\n"
              "requests = []\n"
              "second = ScriptedModel(lambda req: (requests.append([i.get('content') for i in req.history]),"
              " 'Second answer.')[1])")
    kernel.ok("%%agent -m first\nFirst question?")
    before = kernel.value("_agent.history")
    kernel.ok("%%agent --continue -m second\nSecond question?")
    after = kernel.value("_agent.history")
    assert after[: len(before)] == before
    assert after[len(before)] == {"type": "message", "role": "user", "content": "Second question?"}
    assert kernel.value("requests") == [["First question?", "First answer.", "Second question?"]]
    assert kernel.value("_agent.answer") == "Second answer."


def test_tools_option_takes_user_tools(kernel: KernelSession):
    kernel.ok(
        "@tool\n"
        "def add(a: int, b: int) -> int:\n"
        "    'Add two integers.'\n"
        "    return a + b\n"
        "def shout(text: str) -> str:\n"
        "    'Upper-case a text.'\n"
        "    return text.upper()\n"
        "offered = []\n"
        "def _script(req):\n"
        "    offered.append(sorted(t['name'] for t in req.tools))\n"
        "    if len(offered) == 1:\n"
        "        return [Call('add', {'a': 2, 'b': 3}), Call('shout', {'text': 'hi'})]\n"
        "    return 'Done.'\n"
        "m = ScriptedModel(_script)"
    )
    cell = kernel.run("%%agent -m m --tools add,shout\nuse them")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("offered") == [["add", "shout"], ["add", "shout"]]
    assert [f["output"] for f in kernel.value("_agent.partial_findings")] == ["5", "HI"]


def test_streamed_text_is_throttled(kernel: KernelSession):
    # 600 pieces of text in about 1.2 s must not become 600 widget updates: the panel shows the text at most
    # every 0.1 s (plus the 0.5 s ticker), and the status line does not move per piece.
    # (Words that differ: the same word 600 times is a runaway response, which the text-loop guard cuts.)
    kernel.ok("fast = ScriptedModel([Turn(text=' '.join(f'word{i}' for i in range(600)), delay=0.002)])")
    cell = kernel.run("%%agent -m fast\ntalk a lot")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    updates = [m["content"]["data"]["state"] for m in cell.of_type("comm_msg")
               if m["content"]["data"].get("method") == "update"]
    streamed = [u["value"] for u in updates if 'style="white-space: pre-wrap"' in str(u.get("value", ""))]
    print(f"streamed-text updates: {len(streamed)}, all widget updates: {len(updates)}")
    assert 1 <= len(streamed) <= 40, len(streamed)
    assert len(updates) <= 120, len(updates)
    assert kernel.value("_agent.answer.count('word')") == 600


def test_prints_from_a_tool_thread_land_in_the_agent_cell(kernel: KernelSession):
    # A sync tool runs in a worker thread that copies the cell's context, so what it prints is part of the
    # %%agent cell's output, not of whichever cell runs next. (One write per line: print's text and its newline are
    # two writes, which the two calls' threads may interleave.)
    kernel.ok(
        "@tool\n"
        "def chatty(n: int) -> str:\n"
        "    'Print a line, then answer.'\n"
        "    print(f'tool says {n}\\n', end='')\n"
        "    return 'ok'\n"
        "m = ScriptedModel([[Call('chatty', {'n': 1}), Call('chatty', {'n': 2})], 'Done.'])"
    )
    cell = kernel.run("%%agent -m m --tools chatty\ntalk")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert sorted(cell.stdout.splitlines()) == ["tool says 1", "tool says 2"], cell.describe()
    assert kernel.run("print('next')").stdout == "next\n"


def test_unknown_tool_is_a_config_error(kernel: KernelSession):
    kernel.ok("m = ScriptedModel(['unused'])")
    cell = kernel.run("%%agent -m m --tools read_file,nope\nhello")
    assert cell.status == "error"
    (error,) = cell.errors
    assert error["ename"] == "AgentConfigError"
    assert "unknown tool 'nope'" in error["evalue"]
    assert len(error["traceback"]) == 1 and "\n" not in error["evalue"]
    assert_clean_traceback(error)


def test_no_model_and_no_key_is_one_clear_sentence(kernel: KernelSession):
    assert kernel.value("os.environ.get('OPENAI_API_KEY')") is None
    cell = kernel.run("%%agent\nhello")
    assert cell.status == "error"
    (error,) = cell.errors
    assert error["ename"] == "AgentConfigError"
    assert len(error["traceback"]) == 1, error["traceback"]
    assert_clean_traceback(error)
    assert "OPENAI_API_KEY" in error["evalue"] and "ScriptedModel" in error["evalue"]
    assert "\n" not in error["evalue"] and error["evalue"].endswith(".")
    # a failed start leaves a LoopResult a notebook can inspect
    assert kernel.value(f"(_agent.status, _agent.detail == {error['evalue']!r})") == ["fatal_error", True]


# -- side-effecting tools ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["CI", "AGENTKERNEL_NONINTERACTIVE"])
def test_side_effects_denied_non_interactively(kernel: KernelSession, variable: str):
    kernel.ok(WRITER + f"os.environ[{variable!r}] = '1'")
    cell = kernel.run("%%agent -m writer --tools write_note\nwrite hi")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert not [m for m in cell.of_type("comm_open") if m["content"]["data"]["state"].get("description")
                in ("Approve", "Deny")]
    assert kernel.value("notes") == []
    (seen,) = kernel.value("seen_outputs")
    assert seen.startswith("denied"), seen  # the model is told


def test_allow_writes_runs_side_effects(kernel: KernelSession):
    kernel.ok(WRITER + "os.environ['CI'] = '1'")
    cell = kernel.run("%%agent -m writer --tools write_note --allow-writes\nwrite hi")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("notes") == ["hi"]
    assert kernel.value("seen_outputs") == ["written"]


@pytest.mark.parametrize("button", ["Approve", "Deny"])
def test_approve_and_deny_buttons(kernel: KernelSession, button: str):
    kernel.ok(WRITER)  # CI unset: a person is there to ask
    cell = kernel.submit("%%agent -m writer --tools write_note\nwrite hi")
    cell.wait_for_button("Approve")
    comm = cell.wait_for_button(button)
    kernel.settle(0.3)
    assert not cell.done  # the loop waits for the answer
    kernel.click(comm)
    cell.wait(10)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    if button == "Approve":
        assert kernel.value("notes") == ["hi"]
        assert kernel.value("seen_outputs") == ["written"]
    else:
        assert kernel.value("notes") == []
        (seen,) = kernel.value("seen_outputs")
        assert seen.startswith("denied") and "the user denied it" in seen


# -- the worker-thread fallback (autoawait off) --------------------------------------------------------------------

# With autoawait off the cell is a plain blocking magic: ipykernel delivers the Stop click only after the cell ends,
# so during the run Stop does nothing and only the kernel interrupt (■) stops it. These tests cover what works.


def test_autoawait_off_falls_back_to_a_worker_thread(kernel: KernelSession):
    kernel.ok("m = ScriptedModel([Call('read_file', {'path': 'x.txt'}), 'It says hello.'])")
    kernel.ok("%autoawait False")
    cell = kernel.run("%%agent -m m\nWhat is in x.txt?")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    panel, static = cell.displays
    assert set(panel) == {WIDGET_VIEW}
    assert static["text/plain"].startswith("agent: complete")
    assert kernel.value("_agent.status") == "complete"


def test_autoawait_off_denies_side_effects_at_once(kernel: KernelSession):
    # Approve / Deny could not be clicked while the cell blocks, so the fallback does not wait for them.
    kernel.ok(WRITER)  # CI unset
    kernel.ok("%autoawait False")
    cell = kernel.run("%%agent -m writer --tools write_note\nwrite hi", timeout=10)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("notes") == []
    (seen,) = kernel.value("seen_outputs")
    assert seen == ("denied: write_note has side effects and nobody can approve it: autoawait is off, so the cell "
                    "blocks and its panel cannot be clicked (%autoawait on lets it ask); pass --allow-writes to run "
                    "it unasked"), seen


def test_autoawait_off_interrupt_aborts_cleanly(kernel: KernelSession):
    kernel.ok(SLOW_MODELS)
    kernel.ok("%autoawait False")
    cell = kernel.submit("%%agent -m slow_stream\ngo")
    cell.wait_for(_streaming)
    interrupted = kernel.interrupt()
    cell.wait(10)
    print(f"interrupt (worker-thread fallback): idle {cell.idle_at - interrupted:.3f} s after interrupt_kernel()")
    assert cell.idle_at - interrupted < INTERRUPT_BOUND
    assert [e["ename"] for e in cell.errors] == ["KeyboardInterrupt"], cell.describe()
    assert_aborted_with_valid_history(kernel)


# -- nbval ---------------------------------------------------------------------------------------------------------


def test_notebook_with_agent_cells_passes_nbval_twice(tmp_path: Path):
    import nbformat
    from nbclient import NotebookClient

    cells = [
        nbformat.v4.new_code_cell(
            "%load_ext agentkernel\n"
            "from agentkernel import Call, ScriptedModel, tool\n\n"
            "@tool\n"
            "def lookup(key: str) -> str:\n"
            "    'Look a key up.'\n"
            "    return {'answer': '42'}.get(key, 'unknown')\n\n"
            "model = ScriptedModel([Call('lookup', {'key': 'answer'}), 'The answer is **42**.'])\n"
            "stuck = ScriptedModel([Call('lookup', {'key': 'answer'})] * 5)"
        ),
        nbformat.v4.new_code_cell("%%agent -m model --tools lookup\nWhat is the answer?"),
        nbformat.v4.new_code_cell("%%agent -m stuck --tools lookup\nLook it up, again and again.",
                                  metadata={"tags": ["raises-exception"]}),
        nbformat.v4.new_code_cell("print(_agent.status, len(_agent.partial_findings))"),
    ]
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    env = kernel_env(tmp_path)
    NotebookClient(nb, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    path = tmp_path / "agent.ipynb"
    nbformat.write(nb, path)
    assert nb.cells[3].outputs[0]["text"] == "repeated_tool_call 3\n"
    assert nb.cells[2].outputs[-1]["ename"] == "RepeatedToolCall"

    for attempt in (1, 2):
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
                               "--nbval-current-env", str(path)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"nbval run {attempt} failed:\n{proc.stdout}\n{proc.stderr}"
        assert "4 passed" in proc.stdout, proc.stdout
