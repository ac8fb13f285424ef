"""Every ``%%agent`` option is checked before the run starts (issue 40, item 3), in a real kernel: each bad value
is one line naming the option, and the loopback model server behind the cell gets no request."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_client import KernelSession, kernel_fixtures
from openai_server import Reply, ScriptedServer, chat_events

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = ''
%config AgentMagics.max_seconds = 0.0
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTKERNEL_MODEL"):
    os.environ.pop(_name, None)
from agentkernel import ScriptedModel
"""

session, kernel = kernel_fixtures("options_checked", SETUP)


@pytest.fixture
def server():
    with ScriptedServer(Reply(chat_events(["fine"]))) as server:
        yield server


def one_line(cell, ename: str) -> str:
    """The cell's one line: an error output of class ``ename`` without stack frames, or IPython's ``UsageError``
    line on stderr."""
    assert not cell.displays, cell.describe()  # no panel: the run never started
    if ename == "UsageError":  # IPython shows it on stderr, the cell still failing
        assert cell.status == "error" and not cell.errors, cell.describe()
        (line,) = cell.stderr.strip().splitlines()
        assert line.startswith("UsageError: "), line
        return line
    (error,) = cell.errors
    assert error["ename"] == ename, cell.describe()
    assert len(error["traceback"]) == 1 and "\n" not in error["evalue"], error
    return str(error["evalue"])


@pytest.mark.parametrize("option, ename, says", [
    ("--root {tmp}/missing", "AgentConfigError", "--root: '{tmp}/missing' is no such folder"),
    ("--root {tmp}/a-file", "AgentConfigError", "--root: '{tmp}/a-file' is a file, not a folder"),
    ("--record {tmp}/missing/dir/x.json", "AgentConfigError",
     "--record: cannot write '{tmp}/missing/dir/x.json': there is no folder '{tmp}/missing/dir' (folders are not "
     "made for you)"),
    ("--record /missing-{name}/x.json", "AgentConfigError", "there is no folder '/missing-{name}'"),
    ("--continue {tmp}/a-file", "AgentConfigError", "holds no history (is it a transcript?"),
    ("--continue notes.txt", "AgentConfigError", "--continue: there is no transcript 'notes.txt'"),
    ("--max-seconds 1e400", "UsageError", "argument --max-seconds: must be a finite number, not '1e400'"),
    ("--max-cost nan", "UsageError", "argument --max-cost: must be a finite number, not 'nan'"),
    ("--max-seconds -1", "UsageError", "argument --max-seconds: must be 0 or more, not '-1'"),
    ("--max-tokens 10000000000001", "UsageError", "must be at most 1,000,000,000,000, not '10000000000001'"),
    ("--temperature inf", "UsageError", "argument --temperature: must be a finite number, not 'inf'"),
    ("--bogus", "UsageError", "unrecognized arguments: --bogus (%%agent? lists the options)"),
])
def test_each_bad_option_fails_before_any_request_with_its_line(kernel: KernelSession, server: ScriptedServer,
                                                                 tmp_path: Path, option: str, ename: str, says: str):
    (tmp_path / "a-file").write_text("not a transcript\n")
    name = tmp_path.name
    cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m small "
                      f"{option.format(tmp=tmp_path, name=name)}\nhello")
    assert says.format(tmp=tmp_path, name=name) in one_line(cell, ename)
    assert server.requests == []
    assert "serializ" not in cell.stderr.lower(), cell.stderr  # no jupyter_client warning about a number
    assert not Path(f"/missing-{name}").exists() and not (tmp_path / "missing").exists()  # no folder made
    kernel.ok(f"%%agent --api chat --base-url {server.url} -m small\nhello")  # the kernel goes on
    assert len(server.requests) == 1


def test_a_base_url_without_a_scheme_fails_at_once(kernel: KernelSession):
    cell = kernel.run("%%agent --api chat --base-url notaurl -m small\nhello", timeout=10)
    assert "--base-url: 'notaurl' is not a URL: it begins with http:// or https://" in one_line(
        cell, "AgentConfigError")
    kernel.ok("os.environ['OPENAI_BASE_URL'] = 'localhost:8080/v1'")
    cell = kernel.run("%%agent -m small\nhello", timeout=10)
    assert "$OPENAI_BASE_URL: 'localhost:8080/v1' is not a URL" in one_line(cell, "AgentConfigError")


def test_a_config_value_out_of_range_is_refused_before_the_run(kernel: KernelSession, server: ScriptedServer):
    kernel.ok("%config AgentMagics.max_seconds = float('nan')")  # traitlets' Float takes nan
    try:
        cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m small\nhello")
        assert "--max-seconds: must be a finite number, not nan" in one_line(cell, "AgentConfigError")
    finally:
        kernel.ok("%config AgentMagics.max_seconds = 0.0")
    refused = kernel.run("%config AgentMagics.max_cost = 1e400")
    assert "max_cost" in refused.stderr and kernel.value("get_ipython().magics_manager.registry['AgentMagics']"
                                                         ".max_cost") == 0.0
    assert server.requests == []


def test_continue_takes_any_file_name(kernel: KernelSession, tmp_path: Path):
    kernel.ok("m = ScriptedModel(['first', 'second'])")
    kernel.ok("%%agent -m m\nhello")
    transcript = tmp_path / "run.log"  # a transcript under any name
    kernel.ok(f"import json\n"
              f"open({str(transcript)!r}, 'w').write(''.join(json.dumps({{'event': 'item', 'item': i}}) + '\\n' "
              f"for i in _agent.history))")
    kernel.ok(f"%%agent -m m --continue {transcript}\nand then?")
    said = "[str(i.get('content')) for i in _agent.history if i.get('role') == 'user']"
    assert ["hello" in t for t in kernel.value(said)] == [True, False], kernel.value(said)
    # the one-line %agent: an existing file is the transcript, the words after it the prompt
    kernel.ok(f"%agent -m m --continue {transcript} go on")
    assert ["go on" in t for t in kernel.value(said)] == [False, True], kernel.value(said)


@pytest.mark.parametrize("code", ["%%agent --help\nignored", "%agent -h", "%%agent -m m --help"])
def test_help_shows_what_the_question_mark_shows(kernel: KernelSession, code: str):
    (asked,) = [p for p in kernel.run("%%agent?").reply["content"]["payload"] if p.get("source") == "page"]
    cell = kernel.run(code)
    assert cell.status == "ok" and not cell.errors and not cell.displays, cell.describe()
    (page,) = [p for p in cell.reply["content"]["payload"] if p.get("source") == "page"]
    help_text = page["data"]["text/plain"]
    assert "Run an LLM tool-use loop on the prompt" in help_text and "--max-seconds" in help_text
    assert " ".join(help_text.split()) in " ".join(asked["data"]["text/plain"].split())
    assert kernel.value("'_agent' in dir()") is False  # nothing ran
