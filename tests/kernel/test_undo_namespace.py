"""``%agent_undo`` takes back what a run's ``run_python`` calls did to the kernel's variables, in a real kernel with
no front end: names the run made are removed, rebound and deleted ones get their objects back, objects changed in
place get their contents back in place (another name holding the same frame sees it); a name the user changed since
is left and named; an object over the budget and an uncopyable one are named; a 300 MB object the run never names
is never copied (the kernel's memory does not grow by it); the record names, per call, the variables it changed,
and offers the Undo button; ``jupyter console`` (no cell id) and an ``%agent_undo`` that cannot await undo the
variables the same; a ``%agent_serve`` session is one unit to undo, and a change the user made between two of its
calls is left; a background run is one run to undo, its Undo button in its own cell. The journal's own properties
are tests/unit/test_journal.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from kernel_client import Cell, KernelSession, kernel_fixtures

from agentkernel.jupyter.kernel.undo import UNDO_MIME

pytest.importorskip("pandas")

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
%config AgentMagics.undo_budget = 256
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE"):
    os.environ.pop(_name, None)
get_ipython()._agentkernel_journals = None
get_ipython()._agentkernel_changes = None
from agentkernel import Call, ScriptedModel
import numpy as np, pandas as pd
"""

DATA = """\
df = pd.DataFrame({"city": ["Oslo", "Lima", "Pune"], "rain": [3.0, 0.0, 1.5], "wind": [1, 2, 3]})
view = {"frame": df}
arr = np.arange(6.0)
rows = [1, [2]]
config = {"k": 1}
model = "untrained"
"""

CALLS = [
    "df.drop(columns=['wind'], inplace=True)\narr[:] = 0\nrows[1].append(3)\ndel config",
    "df['wet'] = df.rain > 1\nmodel = 'fitted'\ntmp = [1, 2]",
]


def run(kernel: KernelSession, calls: list[str], *, console: bool = False, timeout_option: str = "") -> Cell:
    """A scripted %%agent cell (writes allowed) whose model runs each piece of code with run_python; with
    ``timeout_option`` the cell may end in the error the option's stop raises."""
    script = ", ".join(f"Call('run_python', {{'code': {code!r}}})" for code in calls)
    kernel.ok(f"m = ScriptedModel([{script}, 'done'])")
    cell = kernel.submit(f"%%agent -m m --allow-writes {timeout_option}\ngo".replace("  ", " "),
                         console=console).wait(60)
    assert timeout_option or cell.status == "ok" and not cell.errors, cell.describe()
    return cell


def undo(kernel: KernelSession, line: str = "", *, console: bool = False) -> str:
    cell = kernel.submit(f"%agent_undo {line}".strip(), console=console).wait(60)
    assert cell.status == "ok" and cell.stdout.count("\n") == 1, cell.describe()
    return cell.stdout.strip()


def record_text(cell: Cell) -> str:
    return "\n".join(str(bundle.get("text/html", "")) + str(bundle.get("text/plain", ""))
                     for bundle in cell.displays)


def test_one_undo_gives_back_the_variables_and_names_what_no_undo_takes_back(kernel: KernelSession):
    kernel.ok(DATA)
    cell = run(kernel, CALLS)
    record = record_text(cell)
    assert "df (in place), arr (in place), rows (in place), config (deleted)" in record
    assert "df (in place), model (rebound), tmp (new)" in record
    assert kernel.value("list(df.columns)") == ["city", "rain", "wet"]

    said = undo(kernel)
    run_id = kernel.value("_agent.run_id")
    assert said.startswith(f"undid run {run_id}: restored 6 variables: ")
    for part in ("df (contents)", "arr (contents)", "rows (contents)", "config (brought back)", "model (rebound)",
                 "tmp (removed)"):
        assert part in said
    assert said.endswith("what the code of its 2 run_python calls did outside the kernel's variables (files, "
                         "requests) is not undone")
    assert kernel.value("list(df.columns)") == ["city", "rain", "wind"]
    assert kernel.value("view['frame'] is df and df.rain.tolist() == [3.0, 0.0, 1.5]")  # restored in place
    assert kernel.value("arr.tolist()") == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert kernel.value("[rows, config, model, 'tmp' in dir()]") == [[1, [2]], {"k": 1}, "untrained", False]
    assert undo(kernel, run_id) == f"nothing left to undo of run {run_id}"


def test_a_variable_the_user_changed_since_the_run_is_left_and_named(kernel: KernelSession):
    kernel.ok(DATA)
    run(kernel, CALLS)
    kernel.ok("model = 'mine'\nrows.append('mine')")
    said = undo(kernel)
    assert "left as they are, changed since the run: model, rows" in said
    assert kernel.value("[model, rows, list(df.columns)]") == ["mine", [1, [2, 3], "mine"], ["city", "rain", "wind"]]
    kernel.ok("model = 'fitted'\nrows.pop()")  # as the run left them: the next undo takes them back
    assert "rows (contents), model (rebound)" in undo(kernel)
    assert kernel.value("[model, rows]") == ["untrained", [1, [2]]]


def test_over_the_budget_and_uncopyable_objects_are_named(kernel: KernelSession, tmp_path):
    kernel.ok(f"%config AgentMagics.undo_budget = 1\nbig = np.zeros(2**18)\nf = open({str(tmp_path / 'x')!r}, 'w')")
    run(kernel, ["big[0] = 1\nf.write('x')\nnote = 'kept'"])
    said = undo(kernel)
    assert "note (removed)" in said
    assert "not restored: big (2 MB, over the 1 MB budget: not copied), f (an open file or stream: not copied)" \
        in said
    assert kernel.value("big[0]") == 1.0


def test_a_300_mb_object_the_run_never_names_is_never_copied(kernel: KernelSession):
    kernel.ok("%config AgentMagics.undo_budget = 2048\nhuge = np.ones(300 * 2**20 // 8)\nsmall = [1]\n"
              "def rss():\n    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')")
    before = kernel.value("rss()")
    run(kernel, ["small.append(2)"])
    grown = kernel.value("rss()") - before
    assert grown < 100 * 2**20, f"the kernel grew by {grown / 2**20:.0f} MB"
    assert kernel.value("get_ipython()._agentkernel_journals.runs[_agent.run_id].kept") < 2**20
    assert "small (contents)" in undo(kernel)
    kernel.ok("del huge")


def test_jupyter_console_undoes_the_variables_without_a_front_end(kernel: KernelSession):
    kernel.ok("rows = [1]")
    run(kernel, ["rows.append(2)\nnew = 1"], console=True)
    said = undo(kernel, console=True)
    assert said.startswith("undid run ") and "rows (contents), new (removed)" in said
    assert kernel.value("[rows, 'new' in dir()]") == [[1], False]


def test_the_record_offers_the_undo_and_an_unawaited_undo_takes_back_the_variables(kernel: KernelSession):
    kernel.ok(DATA)
    cell = run(kernel, CALLS)
    run_id = kernel.value("_agent.run_id")
    (button,) = [bundle for bundle in cell.displays if UNDO_MIME in bundle]
    assert button[UNDO_MIME] == {"cells": 0, "variables": 6}  # the same in every re-run (nbval compares it)
    assert button["text/plain"] == ("this run changed 6 variables; while this kernel runs, %agent_undo takes back the "
                                    "newest run, %agent_undo RUN_ID this one (_agent.run_id)")
    (metadata,) = [m["content"]["metadata"] for m in cell.of_type("display_data") if UNDO_MIME in m["content"]["data"]]
    assert metadata == {UNDO_MIME: {"run_id": run_id}}  # the button's run
    inline = kernel.ok(f"%agent_undo {run_id}\nafter = 1")  # not alone: not awaited, the variables only
    assert inline.stdout.startswith(f"undid run {run_id}: restored 6 variables: "), inline.describe()
    assert kernel.value("[list(df.columns), model]") == [["city", "rain", "wind"], "untrained"]


def test_what_code_that_failed_or_was_stopped_had_changed_is_taken_back(kernel: KernelSession):
    kernel.ok(DATA)
    run(kernel, ["df.drop(columns=['wind'], inplace=True)\nmodel = 'half'\nraise ValueError('midway')",
                 "import time\nrows.append(9)\ntime.sleep(0.05)\nwhile True:\n    pass"],
        timeout_option="--max-seconds 3")
    said = undo(kernel)
    assert "df (contents)" in said and "model (rebound)" in said and "rows (contents)" in said, said
    assert kernel.value("[list(df.columns), model, rows]") == [["city", "rain", "wind"], "untrained", [1, [2]]]


def test_a_journal_that_fails_never_keeps_the_code_from_running_and_the_undo_says_so(kernel: KernelSession):
    kernel.ok("import agentkernel.journal as _journal\n_before = _journal.Journal.before\n"
              "_journal.Journal.before = lambda *args, **kwargs: 1 / 0")
    try:
        run(kernel, ["made = 'by the code'"])
    finally:
        kernel.ok("_journal.Journal.before = _before")
    assert kernel.value("made") == "by the code"
    said = undo(kernel)
    assert "not restored: what run_python call 1 did (the undo journal failed: ZeroDivisionError)" in said, said


def test_a_run_that_changes_no_variable_leaves_no_button_and_says_so(kernel: KernelSession):
    kernel.ok(DATA)
    cell = run(kernel, ["print(len(df))"])
    assert not [bundle for bundle in cell.displays if UNDO_MIME in bundle]
    assert "run_python(code=\"print(len(df))\") · ok\n" in record_text(cell) + "\n"
    assert undo(kernel) == "nothing left to undo: the changes of this kernel's runs have been taken back"


def test_a_background_run_is_undone_as_one_run_and_leaves_its_button_in_its_cell(kernel: KernelSession):
    kernel.ok(DATA)
    script = ", ".join(f"Call('run_python', {{'code': {code!r}}})" for code in CALLS)
    kernel.ok(f"m = ScriptedModel([{script}, 'done'])")
    started = kernel.run("%%agent -m m --allow-writes --background\ngo")
    assert "goes on in the background" in started.stdout, started.describe()
    kernel.ok("%agent_wait")
    run_id = kernel.value("_agent.run_id")
    deadline = time.monotonic() + 30
    while not [m for m in started.messages if UNDO_MIME in m["content"].get("data", {})]:
        assert time.monotonic() < deadline, started.describe()
        kernel.pump(0.05)
    said = undo(kernel)
    assert said.startswith(f"undid run {run_id}: restored 6 variables: "), said
    assert kernel.value("[list(df.columns), model, 'tmp' in dir()]") == [["city", "rain", "wind"], "untrained", False]


@asynccontextmanager
async def mcp_client(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    httpx2 = pytest.importorskip("httpx2")
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def test_a_served_session_is_one_unit_to_undo(kernel: KernelSession):
    pytest.importorskip("mcp")
    kernel.ok(DATA)
    kernel.ok("%agent_serve --allow-writes")
    url, headers = kernel.value("_agent_serve.url"), kernel.value("_agent_serve.headers")
    session_id = kernel.value("_agent_serve.server.session.session_id")

    async def main() -> None:
        async with mcp_client(url, headers) as client:
            await client.call_tool("run_python", {"code": CALLS[0]})
            await asyncio.to_thread(kernel.ok, "rows.append('mine')\nmine = 1")  # the user, between two calls
            await client.call_tool("run_python", {"code": CALLS[1]})

    asyncio.run(asyncio.wait_for(main(), 90))
    stopped = kernel.ok("%agent_serve stop").stdout
    assert f"%agent_undo {session_id} takes back what its calls did to the variables" in stopped
    said = undo(kernel)
    assert said.startswith(f"undid part of run {session_id}: restored 5 variables: "), said
    assert "left as they are, changed since the run: rows" in said
    assert kernel.value("[list(df.columns), model, 'tmp' in dir(), config, rows, mine]") == [
        ["city", "rain", "wind"], "untrained", False, {"k": 1}, [1, [2, 3], "mine"], 1]


session, kernel = kernel_fixtures("undo_namespace", SETUP)


def test_forget_lets_go_of_what_a_run_kept_to_undo_and_it_can_no_longer_be_undone(kernel: KernelSession):
    kernel.ok("import gc, weakref\nbig = np.zeros(2**20)\n_alive = weakref.ref(big)\nrows = [1]")
    run(kernel, ["del big\nrows.append(2)"])
    run_id = kernel.value("_agent.run_id")
    assert kernel.value("gc.collect() >= 0 and _alive() is not None")  # the deleted array is kept for the undo
    assert undo(kernel, "--forget nope") == ("nothing to forget: this kernel keeps no variables of run nope (it keeps "
                                             "those of its last 20 runs)")
    assert undo(kernel, "--forget a b") == "%agent_undo --forget takes at most one run id, not 'a b'"
    said = undo(kernel, f"--forget {run_id}")
    assert said == (f"forgot what run {run_id} did to the variables: the old objects of 2 variables and 0 KB of "
                    "copies are let go, and no undo can take those changes back (the notebook's cells still can)")
    assert kernel.value("gc.collect() >= 0 and _alive() is None")  # freed
    assert kernel.value("[rows, 'big' in dir()]") == [[1, 2], False]  # the run's changes stay
    assert undo(kernel).startswith("nothing")
    assert undo(kernel, f"--forget {run_id}").startswith("nothing to forget")


def test_forget_without_a_run_lets_go_of_every_run_and_works_unawaited(kernel: KernelSession):
    kernel.ok("rows = [1]\nmodel = 'a'")
    run(kernel, ["rows.append(2)"])
    run(kernel, ["model = 'b'"])
    inline = kernel.ok("%agent_undo --forget\nafter = 1")  # not alone in its cell: not awaited, the same
    assert inline.stdout.startswith("forgot what 2 runs did to the variables: the old objects of 2 variables and "), \
        inline.describe()
    assert kernel.value("get_ipython()._agentkernel_journals.runs") == {}
    assert kernel.value("[rows, model]") == [[1, 2], "b"]
    assert undo(kernel, "--forget") == "nothing to forget: no run of this kernel keeps variables to undo"
