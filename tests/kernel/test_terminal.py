"""``%%agent`` in terminal IPython and in ``jupyter console``, driven
through a pty as a person types.

A ``%%agent`` line waits for the cell body as ``%%timeit`` does, and Enter on one empty line runs it; a
side-effecting call is asked about on the terminal, its code shown as code: ``y``, ``a`` (the tool for the rest of
the run), a note that denies, and Ctrl-C, which denies and stops the run. Ctrl-C during a run is named as the
user's.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect  # type: ignore[import-untyped]
import pytest
from timing import wait_until

ROOT = Path(__file__).resolve().parents[2]
QUESTION = re.escape("waiting for approval · Approve run_python? [y]es / [a]ll this run / [n]o / note: ")
SETUP = ("from agentkernel import Call, ScriptedModel; "
         "twice = lambda: ScriptedModel([Call('run_python', {'code': 'x = 6 * 7'}), "
         "Call('run_python', {'code': 'y = 1'}), 'done'])")


OUTPUTS = "[o['output'] for o in _agent.history if o['type'] == 'function_call_output']"


class Terminal:
    """``python -m IPython`` (prompt_toolkit's full front end) in a pty."""

    def __init__(self, root: Path):
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "AGENTKERNEL_NONINTERACTIVE")}
        env.update(PYTHONPATH=str(ROOT), IPYTHONDIR=str(root / "ipython"),
                   AGENTKERNEL_TRANSCRIPTS=str(root / "transcripts"))
        self.child = pexpect.spawn(sys.executable, ["-m", "IPython", "--no-banner", "--colors=NoColor"], env=env,
                                   cwd=str(root), encoding="utf-8", timeout=30, dimensions=(50, 200))
        self.count = 1
        self.prompt()

    def prompt(self) -> str:
        """Wait for the next ``In [N]:``; what came before it (escape sequences removed)."""
        self.child.expect(rf"In \[{self.count}\]:")
        self.count += 1
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r", "", self.child.before)

    def cell(self, *lines: str) -> str:
        """Type the lines, Enter after each; the output up to the next prompt."""
        for line in lines:
            self.child.sendline(line)
        return self.prompt()

    def ask(self, *lines: str) -> str:
        """Type a cell of ``lines`` and the one empty line that ends it; wait for the approval question and return
        what came before it."""
        for line in (*lines, ""):
            self.child.sendline(line)
        self.child.expect(QUESTION)
        return str(self.child.before)

    def value(self, expression: str) -> str:
        self.child.sendline(f"print('VALUE', repr({expression}), 'END')")
        self.child.expect(r"VALUE (.*) END\r")
        value = self.child.match.group(1)
        self.prompt()
        return value


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(tmp_path)
    try:
        term.cell("%load_ext agentkernel")
        term.cell(SETUP)
        yield term
    finally:
        term.child.sendline("exit")
        term.child.expect(pexpect.EOF)
        term.child.close()


def test_ipython_here_is_the_9_series_of_this_python():
    version = pexpect.run(f"{sys.executable} -m IPython --version", encoding="utf-8").strip()
    assert version.startswith("9."), version


def test_a_cell_waits_for_its_body_and_approvals_are_asked_on_the_terminal(terminal: Terminal):
    child = terminal.child
    child.sendline("m = twice()")
    terminal.prompt()
    child.sendline("%%agent -m m")
    assert child.expect([r"\.\.\.:", r"UsageError", rf"In \[{terminal.count}\]:"]) == 0  # waits, like %%timeit
    asked = terminal.ask("compute x")  # one empty line ends the cell
    assert re.search(r"run_python has side effects; its arguments:\r?\ncode:\r?\n    x = 6 \* 7\r?\n", asked), asked
    assert '"code"' not in asked  # code as code, not as a JSON string
    child.sendline("y")
    child.expect(QUESTION)  # asked again: "y" approves one call
    child.sendline("n")
    shown = terminal.prompt()
    assert "agent: complete · 3 rounds · 2 tool calls · 1 call denied" in shown, shown
    # the record shows both approvals though no panel asked them (the runner's events)
    record = re.sub(r"\s+", " ", shown)
    assert "approval: run_python · approved" in record and "approval: run_python · denied" in record, shown
    # where runs are saved is said once, before the first run's question (the terminal has no panel to say it)
    assert re.search(r"agentkernel: runs are saved in \S*transcripts \(the newest \d+ kept; --no-transcript: none\)",
                     asked), asked
    assert terminal.value("x") == "42"
    assert terminal.value(OUTPUTS) == repr(["(the code ran; no output and no value)",
                                             "denied: run_python has side effects and the user denied it"])
    terminal.cell("m = twice()")
    again = terminal.ask("%%agent -m m", "compute")
    assert "runs are saved" not in again
    terminal.child.sendline("a")
    terminal.prompt()


def test_all_this_run_and_a_note(terminal: Terminal):
    child = terminal.child
    terminal.cell("m = twice()")
    terminal.ask("%%agent -m m", "compute")
    child.sendline("a")  # run_python for the rest of the run: the second call is not asked about
    shown = terminal.prompt()
    assert "agent: complete · 3 rounds · 2 tool calls ·" in shown and "Approve" not in shown  # (since the "a")
    assert terminal.value("_agent.executed_code") == repr(["x = 6 * 7", "y = 1"])
    terminal.cell("m = ScriptedModel([Call('run_python', {'code': 'z = 0'}), 'done'])")
    child.sendline("%agent -m m compute")  # one line: runs at once
    child.expect(QUESTION)
    assert "approval: run_python · approved for the rest of this run" in re.sub(r"\s+", " ", shown), shown
    child.sendline("use the variable x instead")
    noted = terminal.prompt()
    assert terminal.value(OUTPUTS) == repr(["denied by the user: use the variable x instead"])
    assert "approval: run_python · denied with a note" in re.sub(r"\s+", " ", noted), noted


def test_ctrl_c_at_the_question_denies_and_stops_the_run(terminal: Terminal):
    child = terminal.child
    terminal.cell("m = twice()")
    terminal.ask("%%agent -m m", "compute")
    child.sendintr()
    shown = terminal.prompt()
    assert "denied: the run is stopped" in shown, shown
    assert terminal.value("_agent.status") == repr("aborted")
    assert terminal.value(OUTPUTS) == repr(["denied: run_python has side effects and the run was stopped at its "
                                             "approval"])
    assert terminal.value("'x' in dir()") == "False"
    assert terminal.value("1 + 1") == "2"  # the shell goes on


def test_a_multi_line_code_argument_is_shown_as_the_code_it_is(terminal: Terminal):
    terminal.cell("m = ScriptedModel([Call('run_python', {'code': 'import os\\nz = os.sep'}), 'done'])")
    asked = terminal.ask("%%agent -m m", "compute")
    assert re.search(r"code:\r?\n    import os\r?\n    z = os.sep\r?\n", asked) and "\\n" not in asked, asked
    terminal.child.sendline("y")
    terminal.prompt()
    assert terminal.value("z") == "'/'"


def test_ctrl_c_during_a_run_is_named_as_the_users(terminal: Terminal, tmp_path: Path):
    child = terminal.child
    started = tmp_path / "started"  # written by the run's first call: then ten words come, a second each
    code = f"open({str(started)!r}, 'w').close()"
    terminal.cell(f"slow = ScriptedModel([Call('run_python', {{'code': {code!r}}}), "
                  "'one two three four five six seven eight nine ten'], delay=1.0)")
    child.sendline("%agent -m slow --allow-writes count")
    wait_until(started.exists, "the run under way")  # the terminal shows nothing of it until it ends
    child.sendintr()
    shown = terminal.prompt()
    assert "interrupted by you (Ctrl-C)" in shown and "kernel interrupt" not in shown, shown
    assert terminal.value("(_agent.status, _agent.detail)") == repr(("aborted", "interrupted by you (Ctrl-C)"))


def test_invisible_characters_are_shown_and_counted_before_the_question(terminal: Terminal):
    """A right-to-left override and a zero-width space in run_python's code reach the terminal as
    ⟨U+202E⟩ and ⟨U+200B⟩, flagged before the question, never raw."""
    child = terminal.child
    terminal.cell("m = ScriptedModel([Call('run_python', {'code': 'x = 1  # \\u202e y = 2\\u200b'}), 'done'])")
    child.sendline("%agent -m m compute")
    child.expect(QUESTION)
    asked = child.before
    assert "\u202e" not in asked and "\u200b" not in asked
    assert "x = 1  # ⟨U+202E⟩ y = 2⟨U+200B⟩" in asked, asked
    assert "WARNING: this call holds 2 invisible characters" in asked, asked
    child.sendline("y")
    terminal.prompt()
    assert terminal.value("x") == "1"  # what ran is the model's code itself


def test_agent_undo_takes_back_the_variables_in_terminal_ipython(terminal: Terminal):
    terminal.cell("rows = [1]; m = ScriptedModel([Call('run_python', {'code': 'rows.append(2); made = 1'}), 'done'])")
    terminal.child.sendline("%%agent -m m --allow-writes")
    for line in ("go", ""):
        terminal.child.sendline(line)
    assert "rows (in place), made (new)" in terminal.prompt()
    said = terminal.cell("%agent_undo")
    assert "undid run" in said and "restored 2 variables: rows (contents), made (removed)" in said, said
    assert terminal.value("[rows, 'made' in dir()]") == "[[1], False]"


def test_agent_serve_says_it_needs_a_jupyter_kernel(terminal: Terminal):
    shown = terminal.cell("%agent_serve")
    assert "UsageError" in shown and "%agent_serve needs a Jupyter kernel" in shown, shown


def test_background_runs_in_the_foreground_in_terminal_ipython_saying_so(terminal: Terminal):
    terminal.cell("hi = ScriptedModel(['hello there'])")
    shown = terminal.cell("%agent --background -m hi greet me")
    assert shown.count("--background runs in the foreground here: terminal IPython runs its event loop only while "
                       "a cell runs") == 1, shown
    assert "agent: complete" in shown and "hello there" in shown, shown
    assert "no background runs" in terminal.cell("%agent_runs")


def test_jupyter_console_asks_on_the_terminal_and_runs_on_y(tmp_path: Path):
    """A console's request (``allow_stdin`` and no ``cellId``) is asked through ``input()``, as terminal IPython
    asks: it waited ``approval_timeout`` (300 s) for a panel nobody could click, then denied."""
    pytest.importorskip("jupyter_console")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "AGENTKERNEL_NONINTERACTIVE")}
    env.update(PYTHONPATH=str(ROOT), IPYTHONDIR=str(tmp_path / "ipython"), JUPYTER_RUNTIME_DIR=str(tmp_path / "run"),
               AGENTKERNEL_TRANSCRIPTS=str(tmp_path / "transcripts"))
    child = pexpect.spawn(sys.executable, ["-m", "jupyter_console", "--simple-prompt", "--no-confirm-exit"], env=env,
                          cwd=str(tmp_path), encoding="utf-8", timeout=60, dimensions=(50, 200))
    try:
        for number, line in enumerate(["%load_ext agentkernel", SETUP, "m = twice()", "%agent -m m compute"], 1):
            child.expect(rf"In \[{number}\]: ")
            child.sendline(line)
        child.expect(QUESTION, timeout=30)  # at once: not after approval_timeout
        assert re.search(r"code:\r?\n    x = 6 \* 7", child.before), child.before
        child.sendline("y")
        child.expect(QUESTION)
        child.sendline("n")
        child.expect(r"In \[5\]: ")
        assert "agent: complete · 3 rounds · 2 tool calls · 1 call denied" in child.before, child.before
        child.sendline("print('VALUE', x, 'y' in dir())")
        child.expect(r"In \[6\]: ")
        assert "VALUE 42 False" in child.before, child.before
        child.sendline("exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
