"""The ``%%agent`` options table: help, line splitting, the merge order and bad values, in a real kernel.

The first tests need no kernel (the splitting and the table itself); the rest drive one kernel for the module, as
``tests/kernel/test_magic_kernel.py`` does, each starting from a fresh namespace with no agent environment variables.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
from kernel_client import KernelSession, kernel_fixtures
from test_magic_kernel import RESET

from agentkernel.jupyter.kernel import KERNEL_TOOL_NAMES
from agentkernel.jupyter.options import GROUPS, OPTIONS, AgentOptions, merge, split_line
from agentkernel.tools.files import FILE_TOOL_NAMES

# A tool whose output changes every call: the repeated-call guard never trips, so only the stuck window (calls
# repeating a cycle on tool and arguments) can stop a model that keeps calling it.
TICKER = """\
ticks = []

@tool
def tick() -> str:
    "Count one more tick."
    ticks.append(1)
    return f"tick {len(ticks)}"

ticking = ScriptedModel([Call("tick", {})] * 6 + ["done"])
"""


# -- without a kernel --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line, words, rest", [
    ('--system "be terse" -m m', ["--system", "be terse", "-m", "m"], ""),
    ("--root '/a b' --allow-writes", ["--root", "/a b", "--allow-writes"], ""),
    ("-m m what's in x.txt?", ["-m", "m"], "what's in x.txt?"),  # the prompt as typed: apostrophe kept
    ('-m m say "hi" to  bob', ["-m", "m"], 'say "hi" to  bob'),
    ("--allow-writes write it", ["--allow-writes"], "write it"),  # a switch takes no value
    ("--tools a,b --max-seconds=3 go", ["--tools", "a,b", "--max-seconds=3"], "go"),
    ("-m m -- --not-an-option", ["-m", "m"], "--not-an-option"),
    ('--tools "" -m m', ["--tools", "", "-m", "m"], ""),  # no tools at all
    ("", [], ""),
])
def test_split_line(line: str, words: list[str], rest: str):
    assert split_line(line) == (words, rest)


def test_every_field_is_an_option_in_a_group():
    assert [o.name for o in OPTIONS] == list(AgentOptions.__dataclass_fields__)
    assert {o.spec.group for o in OPTIONS} == set(GROUPS)
    flags = [flag for o in OPTIONS for flag in o.spec.flags]
    assert len(flags) == len(set(flags))


def test_merge_order_command_line_then_config_then_environment(monkeypatch: pytest.MonkeyPatch):
    traits = {o.name: o.default for o in OPTIONS if o.spec.trait}
    configured = SimpleNamespace(**{**traits, "base_url": "http://configured", "max_seconds": 5.0})
    monkeypatch.setenv("AGENTKERNEL_MODEL", "from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env")
    merged = merge(argparse.Namespace(), configured)
    assert (merged.model, merged.base_url, merged.max_seconds) == ("from-env", "http://configured", 5.0)
    assert merged.tools == [*FILE_TOOL_NAMES, *KERNEL_TOOL_NAMES] and merged.tools is not configured.tools
    merged = merge(argparse.Namespace(model="cli", max_seconds=0.0, out="res"), configured)
    assert (merged.model, merged.max_seconds, merged.out) == ("cli", 0.0, "res")  # 0 switches a configured cap off


# -- in a kernel -------------------------------------------------------------------------------------------------


session, kernel = kernel_fixtures("magic_options", RESET)


@pytest.mark.parametrize("code", ["%%agent?", "%agent?"])
def test_help_groups_every_option_with_its_default(kernel: KernelSession, code: str):
    cell = kernel.run(code)
    assert cell.status == "ok"
    (page,) = [p for p in cell.reply["content"]["payload"] if p.get("source") == "page"]
    text = page["data"]["text/plain"]
    assert "Run an LLM tool-use loop on the prompt" in text  # the magic's docstring
    usage, _ = text.split("Run an LLM tool-use loop", 1)
    assert "%%agent [options]" in usage and "%agent [options] prompt" in usage, usage
    assert "for %agent: the cell body" not in text  # argparse's eaten %
    assert "::" not in usage, usage  # no reST literal-block marker above the usage
    flat = " ".join(text.split())
    positions = [flat.index(f" {group}: --") for group in GROUPS]
    assert positions == sorted(positions), "groups in order"
    for o in OPTIONS:
        if o.spec.flags:
            assert o.spec.flags[0] in flat, o.name
        if o.spec.flags and o.spec.trait:
            assert f"(default: {o.shown_default}" in flat, o.name
        if not o.spec.flags:
            assert f"{o.name} = {o.default!r}" in flat, o.name  # the %config-only settings


def test_quoted_system_prompt_reaches_the_model_unquoted(kernel: KernelSession):
    kernel.ok("seen = []\nm = ScriptedModel(lambda req: (seen.append(req.system), 'ok')[1])")
    kernel.ok("%%agent -m m --system \"be terse, 'really'\"\nhello")
    assert kernel.value("seen") == ["be terse, 'really'"]
    kernel.ok("%agent --system 'one line' -m m say \"hi\" to bob")
    assert kernel.value("seen[-1]") == "one line"
    assert kernel.value("_agent.history[0]['content']") == 'say "hi" to bob'


def test_stuck_window_from_config_and_command_line(kernel: KernelSession):
    kernel.ok(TICKER)
    kernel.ok("%config AgentMagics.stuck_window = 4")
    try:
        cell = kernel.run("%%agent -m ticking --tools tick\ntick")
        assert [e["ename"] for e in cell.errors] == ["NoProgress"], cell.describe()
        assert kernel.value("(_agent.status, _agent.tool_calls)") == ["no_progress", 4]

        kernel.ok("ticking.requests = 0")
        cell = kernel.run("%%agent -m ticking --tools tick --stuck-window 5\ntick")
        assert [e["ename"] for e in cell.errors] == ["NoProgress"], cell.describe()
        assert kernel.value("_agent.tool_calls") == 5  # the command line wins over %config

        kernel.ok("ticking.requests = 0")
        kernel.ok("%%agent -m ticking --tools tick --stuck-window 0\ntick")  # 0: off
        assert kernel.value("(_agent.status, _agent.tool_calls)") == ["complete", 6]
    finally:
        kernel.ok("%config AgentMagics.stuck_window = 8")


def test_stale_turns_and_failure_rounds(kernel: KernelSession):
    kernel.ok("@tool\ndef fail() -> str:\n    'Always fails.'\n    raise RuntimeError('no')\n\n"
              "failing = ScriptedModel(lambda req: Call('fail', {}))\n"
              "@tool\ndef same() -> str:\n    'Always the same.'\n    return 'same'\n\n"
              "stale = ScriptedModel(lambda req: Call('same', {}))")
    cell = kernel.run("%%agent -m failing --tools fail --failure-rounds 2 --stuck-window 0\ngo")
    assert [e["ename"] for e in cell.errors] == ["ToolFailure"], cell.describe()
    assert kernel.value("_agent.rounds") == 2
    cell = kernel.run("%%agent -m stale --tools same --stale-turns 2 --repeat-limit 0 --stuck-window 0\ngo")
    assert [e["ename"] for e in cell.errors] == ["NoProgress"], cell.describe()
    assert "model turns in a row" in kernel.value("_agent.summary")


def test_model_from_command_line_then_config_then_environment(kernel: KernelSession):
    kernel.ok("a = ScriptedModel(['from a'])\nb = ScriptedModel(['from b'])\nc = ScriptedModel(['from c'])\n"
              "os.environ['AGENTKERNEL_MODEL'] = 'a'")
    try:
        kernel.ok("%%agent\nwho?")
        assert kernel.value("_agent.answer") == "from a"
        kernel.ok("%config AgentMagics.model = 'b'")
        kernel.ok("%%agent\nwho?")
        assert kernel.value("_agent.answer") == "from b"
        kernel.ok("%%agent -m c\nwho?")
        assert kernel.value("_agent.answer") == "from c"
    finally:
        kernel.ok("%config AgentMagics.model = ''")


@pytest.mark.parametrize("line, message", [
    ("--max-seconds abc", "argument --max-seconds: invalid float value: 'abc'"),
    ("--api nope", "argument --api: invalid choice: 'nope'"),
    ("--max-iterations -1", "argument --max-iterations: must be 0 or more, not '-1'"),
    ("--stuck-window 2.5", "argument --stuck-window: invalid int value: '2.5'"),
    ('--system "unclosed', "No closing quotation"),
    ("--bogus", "unrecognized arguments: --bogus"),
    ("--max-iterations many", "invalid int value: 'many'"),
    ("--max-s 3", "unrecognized arguments: --max-s"),  # no abbreviations: adding an option would change them
    ("stray words", "%%agent takes its prompt from the cell body; 'stray words' is not an option"),
])
def test_bad_value_is_a_usage_error_and_the_kernel_goes_on(kernel: KernelSession, line: str, message: str):
    kernel.ok("m = ScriptedModel(['fine'])")
    cell = kernel.run(f"%%agent -m m {line}\nhello")
    assert cell.status == "error"
    shown = cell.stderr + "".join(e["evalue"] for e in cell.errors)
    assert "UsageError" in shown and message in shown, cell.describe()
    (line,) = cell.stderr.strip().splitlines()  # one line, with where the options are listed
    assert line.endswith("(%%agent? lists the options)"), line
    assert not cell.displays  # no panel for a cell that never ran
    kernel.ok("%%agent -m m\nhello")
    assert kernel.value("_agent.answer") == "fine"


def test_bad_config_value_is_refused(kernel: KernelSession):
    cell = kernel.run("%config AgentMagics.max_iterations = -1")  # traitlets logs the refusal; the cell goes on
    assert "'max_iterations' trait" in cell.stderr and "should not be less than 0" in cell.stderr, cell.describe()
    assert kernel.value("get_ipython().magics_manager.registry['AgentMagics'].max_iterations") == 0
