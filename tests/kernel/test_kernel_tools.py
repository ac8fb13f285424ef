"""The kernel tools (``list_variables``, ``inspect_variable``, ``last_error``, ``read_notebook`` without a notebook,
``run_python``),
prompt expansion, ``_agent.executed_code`` and ``--cells``, in a real kernel driven over ZMQ with jupyter_client.

Each test runs ``%%agent`` cells with a scripted model that calls the tools, then reads what the model was given
(the ``function_call_output`` items of ``_agent.history``) and what changed in the kernel. pandas, numpy and
matplotlib come from the test extra; the kernel tools only use them when the notebook has imported them.
"""

from __future__ import annotations

import json
import time

import pytest
from kernel_client import Cell, KernelSession, kernel_fixtures
from timing import STOP_BOUND_BUSY

pytest.importorskip("pandas")
pytest.importorskip("matplotlib")


RESET = """\
%reset -f
%autoawait True
import os, sys
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTKERNEL_MODEL"):
    os.environ.pop(_name, None)
for _name in ("last_type", "last_value", "last_traceback"):
    if hasattr(sys, _name):
        delattr(sys, _name)
del _name
from agentkernel import Call, ScriptedModel, Turn


def outputs():
    return [item["output"] for item in _agent.history if item["type"] == "function_call_output"]
"""

DATA = """\
import numpy as np
import pandas as pd

df = pd.DataFrame({"city": ["Oslo", "Lima", None, "Pune"], "temp": [3.5, None, 21.0, 30.25],
                   "rain": [1, 0, 4, 2]})
arr = np.arange(12, dtype=float).reshape(3, 4)
words = ["alpha", "beta", "gamma"]
config = {"depth": 3, "name": "trial"}


class Box:
    def __init__(self):
        self.inner = {"k": 1}
        self.label = "box"


box = Box()


def scale(x: float, factor: float = 2.0) -> float:
    '''Multiply x by factor.

    Second paragraph, not shown.'''
    return x * factor
"""


session, kernel = kernel_fixtures("kernel_tools", RESET)


def agent(kernel: KernelSession, calls: list[tuple[str, dict]], options: str = "", prompt: str = "go",
          timeout: float = 30) -> Cell:
    """Run a ``%%agent`` cell whose scripted model makes ``calls`` (one round each), then answers "done"."""
    script = ", ".join(f"Call({name!r}, {arguments!r})" for name, arguments in calls)
    kernel.ok(f"m = ScriptedModel([{script}, 'done'])")
    return kernel.run(f"%%agent -m m {options}\n{prompt}", timeout=timeout)


def tool_outputs(kernel: KernelSession) -> list[str]:
    return kernel.value("outputs()")


def ok_outputs(kernel: KernelSession, cell: Cell) -> list[str]:
    assert cell.status == "ok" and not cell.errors, cell.describe()
    return tool_outputs(kernel)


# -- read-only tools ---------------------------------------------------------------------------------------------


def test_kernel_tools_are_in_the_default_tool_list(kernel: KernelSession):
    kernel.ok("seen = []\nm = ScriptedModel(lambda req: seen.extend(t['name'] for t in req.tools) or 'ok')")
    kernel.ok("%%agent -m m\nhi")
    assert kernel.value("seen") == ["read_file", "list_dir", "search_text", "list_variables", "inspect_variable",
                                    "last_error", "read_notebook", "add_cell", "edit_cell", "run_python"]


def test_list_variables_shows_user_variables_with_sizes(kernel: KernelSession):
    kernel.ok(DATA + "_private = 1\nimport json")
    (listing,) = ok_outputs(kernel, agent(kernel, [("list_variables", {})]))
    rows = {line.split()[0]: line for line in listing.splitlines()[1:]}
    assert listing.splitlines()[0].split() == ["name", "type", "size", "value"]
    assert set(rows) == {"Box", "Call", "ScriptedModel", "Turn", "arr", "box", "config", "df", "m", "outputs", "scale",
                         "words"}, listing  # no _private, no json (a module), no In/Out/exit
    assert rows["df"].split()[1:4] == ["DataFrame", "(4,", "3)"] and "columns: city, temp, rain" in rows["df"]
    assert rows["arr"].split()[1:4] == ["ndarray", "(3,", "4)"] and "float64" in rows["arr"]
    assert rows["words"].split()[1:4] == ["list", "len", "3"] and "['alpha', 'beta', 'gamma']" in rows["words"]
    assert "scale(x: float, factor: float = 2.0) -> float" in rows["scale"]
    assert " at 0x" not in listing  # no memory addresses: <__main__.Box object>


def test_list_variables_is_bounded(kernel: KernelSession):
    kernel.ok("for _i in range(400):\n    globals()[f'v{_i:03}'] = 'x' * 500")
    (listing,) = ok_outputs(kernel, agent(kernel, [("list_variables", {})]))
    assert listing.endswith("more variables not shown]"), listing[-200:]
    assert max(len(line) for line in listing.splitlines()) < 200
    assert len(listing) <= 20_100


def test_inspect_a_data_frame(kernel: KernelSession):
    kernel.ok(DATA)
    (text,) = ok_outputs(kernel, agent(kernel, [("inspect_variable", {"name": "df"})]))
    assert text.startswith("DataFrame: 4 rows × 3 columns"), text
    assert "  city: str, 1 missing" in text or "  city: object, 1 missing" in text, text
    assert "  temp: float64, 1 missing" in text and "  rain: int64, 0 missing" in text
    assert "missing values in all: 2" in text
    assert "first 4 rows:" in text and "Oslo" in text and "Pune" in text
    describe = text.split("numeric columns (describe):")[1]
    assert "mean" in describe and "18.25" in describe and "1.75" in describe  # temp and rain means


def test_inspect_an_array_a_series_and_dotted_paths(kernel: KernelSession):
    kernel.ok(DATA)
    calls = [("inspect_variable", {"name": "arr"}), ("inspect_variable", {"name": "df.temp"}),
             ("inspect_variable", {"name": "df.columns"}), ("inspect_variable", {"name": "box.inner"}),
             ("inspect_variable", {"name": "arr.shape"})]
    array, series, columns, inner, shape = ok_outputs(kernel, agent(kernel, calls))
    assert array.startswith("ndarray: shape (3, 4), dtype float64, 12 elements"), array
    assert "min 0 · max 11 · mean 5.5" in array
    assert series.startswith("Series 'temp': 4 values, dtype float64, 1 missing"), series
    assert "Index(['city', 'temp', 'rain']" in columns
    assert inner.startswith("dict of 1 item") and "'k': 1" in inner
    assert shape.splitlines() == ["tuple of 2 items:", "  3", "  4"]


def test_inspect_plain_python_objects(kernel: KernelSession):
    kernel.ok(DATA)
    calls = [("inspect_variable", {"name": n}) for n in ("words", "config", "scale", "box", "Box")]
    words, config, scale, box, cls = ok_outputs(kernel, agent(kernel, calls))
    assert words.splitlines() == ["list of 3 items:", "  'alpha'", "  'beta'", "  'gamma'"]
    assert config.splitlines() == ["dict of 2 items:", "  'depth': 3", "  'name': 'trial'"]
    assert scale.splitlines() == ["function scale(x: float, factor: float = 2.0) -> float", "",
                                  "Multiply x by factor."]
    assert box.splitlines()[0] == "__main__.Box" and " at 0x" not in box
    assert cls.startswith("class Box()")


def test_unknown_names_and_expressions_are_error_outputs_and_the_run_goes_on(kernel: KernelSession):
    kernel.ok(DATA + "called = []\ndef spy():\n    called.append(1)")
    names = ["nope", "df.colums", "spy()", "__import__('os')"]
    kernel.ok(f"m = ScriptedModel([[Call('inspect_variable', {{'name': n}}) for n in {names!r}], 'done'])")
    unknown, attribute, call, expression = ok_outputs(kernel, kernel.run("%%agent -m m\ngo"))  # one round
    assert kernel.value("_agent.status") == "complete"
    assert unknown.startswith("error:") and "no variable named 'nope'" in unknown
    assert attribute.startswith("error:") and "'df.colums' does not exist" in attribute
    for text in (call, expression):
        assert text.startswith("error:") and "not evaluated" in text
    assert kernel.value("called") == []  # nothing the model wrote was run


def test_api_keys_never_reach_the_model(kernel: KernelSession):
    key = "sk-test-" + "k3y" * 8
    kernel.ok(f"os.environ['OPENAI_API_KEY'] = {key!r}\nsecret_config = {{'api_key': {key!r}}}")
    calls = [("list_variables", {}), ("inspect_variable", {"name": "secret_config"}),
             ("inspect_variable", {"name": "os.environ"}), ("read_notebook", {"count": 3}),
             ("run_python", {"code": "print(os.environ['OPENAI_API_KEY'])"})]
    kernel.ok("import os")
    texts = ok_outputs(kernel, agent(kernel, calls, "--allow-writes"))
    assert len(texts) == 5 and all("[secret $OPENAI_API_KEY]" in text for text in texts[1:]), texts
    assert not [text for text in texts if "k3y" in text], texts
    kernel.ok("os.environ.pop('OPENAI_API_KEY')")


def test_last_error_after_a_failing_cell(kernel: KernelSession):
    (fresh,) = ok_outputs(kernel, agent(kernel, [("last_error", {})]))
    assert fresh.startswith("no error so far")
    kernel.ok("def ratio(a, b):\n    return a / b")
    failed = kernel.run("total = 10\nratio(total, 0)")
    assert failed.status == "error"
    cell_number = failed.reply["content"]["execution_count"]
    (text,) = ok_outputs(kernel, agent(kernel, [("last_error", {})], prompt="why did my last cell fail?"))
    assert text.splitlines()[0] == "ZeroDivisionError: division by zero"
    assert "Traceback (most recent call last):" in text
    assert f'File "Cell In[{cell_number}]", line 2, in <module>' in text and "return a / b" in text
    assert "interactiveshell" not in text and "IPython" not in text and "/tmp" not in text  # user frames only
    assert text.endswith(f"the cell that raised it, In [{cell_number}]:\ntotal = 10\nratio(total, 0)")


def test_last_error_for_a_syntax_error(kernel: KernelSession):
    failed = kernel.run("x = (1 +")
    assert failed.status == "error"
    (text,) = ok_outputs(kernel, agent(kernel, [("last_error", {})]))
    assert text.startswith("SyntaxError:") and "x = (1 +" in text and "Cell In[" in text, text


def test_one_line_agent_asks_why_the_last_cell_failed(kernel: KernelSession):
    kernel.run("{}['missing']")
    kernel.ok("m = ScriptedModel([Call('last_error', {}), 'A KeyError.'])")
    cell = kernel.run("%agent -m m why did my last cell fail?")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("outputs()")[0].startswith("KeyError: 'missing'")
    assert kernel.value("_agent.history[0]['content']") == "why did my last cell fail?"


def test_notebook_cells_names_read_notebook_which_shows_the_input_history_where_no_notebook_is_known(
        kernel: KernelSession):
    kernel.ok("m = ScriptedModel([Call('read_notebook', {'count': 3}), 'done'])")
    first = kernel.ok("a = 6").reply["content"]["execution_count"]
    kernel.ok("a * 7")
    kernel.ok("print('no Out for this one')")
    (text,) = ok_outputs(kernel, kernel.run("%%agent -m m --tools notebook_cells\nWhat have I been doing?"))
    assert text.endswith(f"The kernel's input history instead:\nIn [{first}]:\na = 6\nIn [{first + 1}]:\na * 7\n"
                         f"Out[{first + 1}]:\n42\nIn [{first + 2}]:\nprint('no Out for this one')")
    (too_few,) = ok_outputs(kernel, agent(kernel, [("read_notebook", {"count": 0})]))
    assert too_few.startswith("error:") and "count at least 1" in too_few


# -- prompt expansion --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt, expected", [
    ("Half of {n * 2} and $word", "Half of 42 and fox"),
    ("Braces {{kept}} for n={n}", "Braces {kept} for n=21"),
    ('Parse {"a": 1} please', 'Parse {"a": 1} please'),  # a field that does not evaluate: left as written
    ("Is {undefined_name} there?", "Is {undefined_name} there?"),
    ('Reply with:\n```json\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n```',
     'Reply with:\n```json\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n```'),
])
def test_prompt_is_expanded_like_a_magic_line(kernel: KernelSession, prompt: str, expected: str):
    kernel.ok("n = 21\nword = 'fox'\nm = ScriptedModel(['ok'])")
    cell = kernel.run(f"%%agent -m m\n{prompt}")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.history[0]['content']") == expected


def test_prompt_expansion_reads_in_and_out(kernel: KernelSession):
    kernel.ok("m = ScriptedModel(['ok'])")
    number = kernel.ok("6 * 7").reply["content"]["execution_count"]
    kernel.ok(f"%%agent -m m\nCell {{In[{number}]!r}} gave {{Out[{number}]}}.")
    assert kernel.value("_agent.history[0]['content']") == "Cell '6 * 7' gave 42."


def test_no_expand_sends_the_prompt_as_written(kernel: KernelSession):
    kernel.ok("n = 21\nm = ScriptedModel(['ok'])")
    kernel.ok("%%agent -m m --no-expand\nHalf of {n * 2} and $n")
    assert kernel.value("_agent.history[0]['content']") == "Half of {n * 2} and $n"
    kernel.ok("m = ScriptedModel(['ok'])")
    kernel.ok("%agent -m m one line with {n}")
    assert kernel.value("_agent.history[0]['content']") == "one line with 21"


# -- run_python --------------------------------------------------------------------------------------------------


def test_run_python_is_denied_when_no_one_can_approve(kernel: KernelSession):
    kernel.ok("os.environ['AGENTKERNEL_NONINTERACTIVE'] = '1'")
    (denied,) = ok_outputs(kernel, agent(kernel, [("run_python", {"code": "made_by_agent = 1"})]))
    assert denied.startswith("denied: run_python has side effects")
    assert kernel.value("'made_by_agent' in globals()") is False
    assert kernel.value("_agent.executed_code") == []


def test_run_python_with_allow_writes_runs_in_the_user_namespace(kernel: KernelSession):
    kernel.ok("os.environ['CI'] = '1'\nbase = 40")
    before = kernel.value("[len(In), len(Out), get_ipython().execution_count]")
    code = "made_by_agent = base + 2\nprint('set it')\nmade_by_agent * 10"
    cell = agent(kernel, [("run_python", {"code": code})], "--allow-writes")
    (text,) = ok_outputs(kernel, cell)
    assert text == "[stdout]\nset it\n[value]\n420"
    assert kernel.value("made_by_agent") == 42
    after = kernel.value("[len(In), len(Out), get_ipython().execution_count]")
    # Cells since `before`: the model's definition, the %%agent cell and the value() probes (silent, unstored).
    assert after[0] - before[0] == after[2] - before[2] == 2 and after[1] == before[1]  # no In/Out of its own
    assert kernel.value("_agent.executed_code") == [code]
    assert "set it" not in cell.stdout  # captured for the model, not printed into the cell


def test_run_python_top_level_await_stderr_and_ipython_syntax(kernel: KernelSession):
    code = "import asyncio, sys\nawait asyncio.sleep(0.01)\nprint('oops', file=sys.stderr)\nx = %time 1\n'ok';"
    (text,) = ok_outputs(kernel, agent(kernel, [("run_python", {"code": code})], "--allow-writes"))
    assert "[stderr]\noops" in text and "[value]" not in text  # a final ';' hides the value, as in a cell
    assert kernel.value("x") == 1


@pytest.mark.parametrize("code, headline", [
    ("def f():\n    return 1 / 0\nprint('before')\nf()", "ZeroDivisionError: division by zero"),
    ("import sys\nsys.exit(3)", "SystemExit: 3"),
    ("exit()", "SystemExit"),
    ("quit(2)", "SystemExit: 2"),
    ("raise SystemExit", "SystemExit"),
    ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    ("x = (", "SyntaxError: '(' was never closed"),
])
def test_run_python_errors_are_error_outputs_and_the_kernel_lives(kernel: KernelSession, code: str, headline: str):
    pid = kernel.value("os.getpid()")
    (text,) = ok_outputs(kernel, agent(kernel, [("run_python", {"code": code})], "--allow-writes"))
    assert text.startswith("error:") and f"{headline}\n" in text.split("[error]\n")[0], text
    assert f"[error]\n{headline}" in text, text
    assert "agentkernel/" not in text and "site-packages" not in text  # the user's frames only
    if headline.startswith("ZeroDivision"):
        assert "[stdout]\nbefore" in text and 'File "<agent code' in text and "return 1 / 0" in text
    if headline.startswith("SystemExit"):
        assert "the kernel keeps running" in text
    assert kernel.value("_agent.status") == "complete"
    assert kernel.ok("print('next cell')").stdout == "next cell\n"
    assert kernel.value("os.getpid()") == pid
    executed = kernel.value("_agent.executed_code")
    assert executed == ([] if headline.startswith("SyntaxError") else [code])  # code that never compiled never ran


def test_run_python_output_is_bounded(kernel: KernelSession):
    code = "for i in range(100_000):\n    print('line', i)"
    (text,) = ok_outputs(kernel, agent(kernel, [("run_python", {"code": code})], "--allow-writes"))
    assert len(text) < 20_100 and text.endswith("characters in all)"), text[-200:]


def test_run_python_figure_is_a_placeholder_for_the_model_and_an_image_in_the_panel(kernel: KernelSession):
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('trend')"
    cell = agent(kernel, [("run_python", {"code": code})], "--allow-writes")
    (text,) = ok_outputs(kernel, cell)
    assert "[display] [image/png " in text and "<Figure size 640x480 with 1 Axes>" in text, text
    size, note = text.split("[image/png ")[1].split("]")[0].split(", ")
    width, height = size.split("x")
    assert int(width) > 100 and int(height) > 100
    assert note == "sent to the model as an image"  # a scripted model gets images (test_kernel_images.py has more)
    assert "Text(0.5, 1.0, 'trend')" in text  # the value
    images = [m for m in cell.of_type("comm_open", "comm_msg") if "image/png" in json.dumps(m["content"]["data"])]
    assert images, "the panel got no output widget with the figure"
    assert kernel.value("len(__import__('matplotlib.pyplot').pyplot.get_fignums())") == 0  # not shown again
    # After the run the figure is in the call's section of the record left in the cell (no widget view).
    ((mime, _, alt),) = cell.record_images()
    assert mime == "image/png" and alt == "<Figure size 640x480 with 1 Axes>"


def test_executed_code_and_cells_option(kernel: KernelSession):
    first, second = "a_var = 1", "b_var = a_var + 1\nb_var"
    cell = agent(kernel, [("run_python", {"code": first}), ("run_python", {"code": second})],
                 "--allow-writes --cells")
    ok_outputs(kernel, cell)
    assert kernel.value("_agent.executed_code") == [first, second]
    shown = kernel.value("get_ipython().display_formatter.format(_agent)[0]['text/plain']")
    assert "code run in the kernel: 2 pieces in .executed_code" in shown
    payloads = cell.reply["content"]["payload"]
    assert [p["source"] for p in payloads] == ["set_next_input"]
    assert payloads[0]["text"] == f"{first}\n\n{second}" and payloads[0]["replace"] is False
    without = agent(kernel, [("run_python", {"code": first})], "--allow-writes")
    assert ok_outputs(kernel, without) and not without.reply["content"]["payload"]


def test_run_python_with_autoawait_off(kernel: KernelSession):
    kernel.ok("%autoawait False")
    (text,) = ok_outputs(kernel, agent(kernel, [("run_python", {"code": "print('hi')\nfallback_var = 3"})],
                                       "--allow-writes"))
    assert text == "[stdout]\nhi" and kernel.value("fallback_var") == 3


def test_approve_shows_the_code_and_runs_it(kernel: KernelSession):
    kernel.ok("m = ScriptedModel([Call('run_python', {'code': 'approved_var = 7'}), 'done'])")
    cell = kernel.submit("%%agent -m m\ngo")
    approve = cell.wait_for_button("Approve")
    shown = cell.wait_for(lambda m: m["msg_type"] == "comm_open" and "approved_var" in json.dumps(m["content"]))
    assert "<span" in json.dumps(shown["content"])  # the code, highlighted, beside the buttons
    kernel.click(approve)
    cell.wait(10)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("approved_var") == 7


# -- Stop while the code runs ------------------------------------------------------------------------------------

SPIN = "spin_started = True\nwhile True:\n    pass"


def _running(cell: Cell) -> None:
    """Wait until the panel shows the run_python call running, then a little longer: its code is in its loop."""
    cell.wait_for(lambda m: m["msg_type"] in ("comm_open", "comm_msg")
                  and "run_python(" in (text := json.dumps(m["content"].get("data", {}), ensure_ascii=False))
                  and "· running" in text)
    cell.session.settle(0.3)


@pytest.mark.parametrize("how", ["stop_button", "max_seconds", "interrupt", "interrupt_autoawait_off"])
def test_stop_ends_a_spinning_run_python_within_a_second(kernel: KernelSession, how: str):
    pid = kernel.value("os.getpid()")
    if how == "interrupt_autoawait_off":  # the worker-thread fallback: only the interrupt can stop it
        kernel.ok("%autoawait False")
    kernel.ok(f"m = ScriptedModel([Call('run_python', {{'code': {SPIN!r}}}), 'never'])")
    options = "--allow-writes" + (" --max-seconds 2" if how == "max_seconds" else "")
    cell = kernel.submit(f"%%agent -m m {options}\nspin")
    stop = cell.wait_for_button("Stop")
    _running(cell)
    if how == "stop_button":
        ended_by = kernel.click(stop)
    elif how.startswith("interrupt"):
        ended_by = kernel.interrupt()
    else:
        ended_by = cell.sent_at + 2.0  # the budget runs from the start of the run, a little after the cell was sent
    cell.wait(10)
    latency = cell.idle_at - ended_by
    print(f"run_python spinning, {how}: idle {latency:.3f} s after the stop")
    assert latency < STOP_BOUND_BUSY, f"{how}: idle {latency:.3f} s after the stop"
    expected = "hit_wall_clock" if how == "max_seconds" else "aborted"
    assert kernel.value("_agent.status") == expected
    assert kernel.value("spin_started") is True
    assert kernel.value("outputs()[-1]").startswith("aborted")
    assert kernel.value("_agent.executed_code") == [SPIN]
    next_cell = kernel.run("print('next cell runs')")
    assert next_cell.status == "ok" and next_cell.stdout == "next cell runs\n", next_cell.describe()
    assert kernel.value("os.getpid()") == pid
    # The spinning thread got the exception: no thread of the run is left.
    deadline = time.monotonic() + 5
    while kernel.value("[t.name for t in __import__('threading').enumerate() if 'agentkernel' in t.name]"):
        assert time.monotonic() < deadline, "the code's thread still runs"
        kernel.settle(0.1)


def test_stop_gets_through_code_that_catches_it_a_few_times(kernel: KernelSession):
    code = ("caught = 0\nspin_started = True\nfor _ in range(3):\n    try:\n        while True:\n            pass\n"
            "    except BaseException:\n        caught += 1\nwhile True:\n    pass")
    kernel.ok(f"m = ScriptedModel([Call('run_python', {{'code': {code!r}}}), 'never'])")
    cell = kernel.submit("%%agent -m m --allow-writes\nspin")
    stop = cell.wait_for_button("Stop")
    _running(cell)
    clicked = kernel.click(stop)
    cell.wait(10)
    assert cell.idle_at - clicked < STOP_BOUND_BUSY
    deadline = time.monotonic() + 5
    while kernel.value("[t.name for t in __import__('threading').enumerate() if 'run-python' in t.name]"):
        assert time.monotonic() < deadline, "the code's thread still runs"
        kernel.settle(0.1)
    assert kernel.value("caught") == 3  # the exception was sent again until the code let it through


def test_stop_ends_the_run_while_the_code_sleeps_in_c(kernel: KernelSession):
    code = "import time\ntime.sleep(3)\nafter_sleep = 1\nwhile True:\n    pass"
    kernel.ok(f"m = ScriptedModel([Call('run_python', {{'code': {code!r}}}), 'never'])")
    cell = kernel.submit("%%agent -m m --allow-writes\nsleep")
    stop = cell.wait_for_button("Stop")
    _running(cell)
    clicked = kernel.click(stop)
    cell.wait(10)
    assert cell.idle_at - clicked < STOP_BOUND_BUSY
    assert kernel.value("_agent.status") == "aborted"
    # The abandoned code is interrupted when time.sleep returns to Python: it never reaches the line after it.
    kernel.settle(3.5)
    assert kernel.value("'after_sleep' in globals()") is False
    assert kernel.value("[t.name for t in __import__('threading').enumerate() if 'run-python' in t.name]") == []


def test_a_stop_right_after_the_start_still_reaches_the_code():
    """In-process: cancelling the runner as soon as its thread has started, twenty times, leaves no thread."""
    import asyncio
    import threading

    from IPython.core.interactiveshell import InteractiveShell

    from agentkernel.jupyter.kernel.code_runner import CodeRunner

    runner = CodeRunner(InteractiveShell.instance())

    async def start_and_cancel() -> None:
        task = asyncio.ensure_future(runner.run("while True:\n    pass"))
        await asyncio.sleep(0)  # the runner starts its thread and awaits it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    for _ in range(20):
        asyncio.run(start_and_cancel())
    deadline = time.monotonic() + 5
    while [t for t in threading.enumerate() if t.name == "agentkernel-run-python"]:
        assert time.monotonic() < deadline, "a code thread still runs"
        time.sleep(0.05)
    assert runner.executed == ["while True:\n    pass"] * 20
