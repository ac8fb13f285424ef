"""Where a newcomer tripped, in a real kernel: bad cassette and transcript files, denials that say the
real reason and are counted, truncation that says whose cap cut it, identical not-run calls shown once, the answer
as Markdown in the saved rendering, option lines expanded like other magics' lines, ``%agent_mcp --mcp-config``,
``_agent`` after a failed start, and an approval nobody answers.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernel_client import KernelSession, kernel_fixtures
from mcp_servers import write_config
from openai_server import TEST_KEY, Reply, ScriptedServer, chat_events

SETUP = """\
%reset -f
%autoawait True
%config AgentMagics.transcripts = False
%config AgentMagics.expand = True
%config AgentMagics.approval_timeout = 300.0
import os, agentkernel
os.environ.pop("CI", None)
os.environ.pop("AGENTKERNEL_NONINTERACTIVE", None)
os.environ.pop("OPENAI_API_KEY", None)
from agentkernel import Call, ScriptedModel, Turn, tool


@tool(read_only=False)
def write_note(text: str) -> str:
    "Append a note (a side effect)."
    return "written"


def outputs():
    return [item["output"] for item in _agent.history if item["type"] == "function_call_output"]
"""

session, kernel = kernel_fixtures("newcomer_kernel", SETUP)


def one_line_error(cell, ename: str = "AgentConfigError") -> str:
    """The cell's one error: of class ``ename``, one line, no stack frames; its message."""
    (error,) = cell.errors
    assert error["ename"] == ename, cell.describe()
    assert len(error["traceback"]) == 1 and "\n" not in error["evalue"], error
    return error["evalue"]


# -- bad --replay / --record / --continue files ------------------------------------------------------------------------

def test_a_missing_or_corrupt_cassette_is_one_line_naming_the_file_and_line(kernel: KernelSession, tmp_path: Path):
    missing = one_line_error(kernel.run(f"%%agent --replay {tmp_path}/none.jsonl\nhi"))
    assert f"--replay: there is no cassette '{tmp_path}/none.jsonl'" in missing
    (tmp_path / "bad.jsonl").write_text('{"events": []}\nnot json\n')
    assert f"{tmp_path}/bad.jsonl:2 is not a cassette line" in one_line_error(
        kernel.run(f"%%agent --replay {tmp_path}/bad.jsonl\nhi"))
    (tmp_path / "odd.jsonl").write_text('{"events": [{"type": "text"}]}\n[1, 2]\n')
    assert f"{tmp_path}/odd.jsonl:1 is not a cassette line" in one_line_error(
        kernel.run(f"%%agent --replay {tmp_path}/odd.jsonl\nhi"))
    assert "is a folder" in one_line_error(kernel.run(f"%%agent --replay {tmp_path}\nhi"))


def test_a_record_path_that_cannot_be_written_is_refused_before_the_run(kernel: KernelSession, tmp_path: Path):
    kernel.ok("m = ScriptedModel(['hello'])")
    assert "is a folder" in one_line_error(kernel.run(f"%%agent -m m --record {tmp_path}\nhi"))
    (tmp_path / "file").write_text("x")
    refused = kernel.run(f"%%agent -m m --record {tmp_path}/file/run.jsonl\nhi")
    assert "is a file, not a folder" in one_line_error(refused)
    assert not (tmp_path / "file").is_dir()


def test_a_bad_continue_file_is_one_line(kernel: KernelSession, tmp_path: Path):
    kernel.ok("m = ScriptedModel(['hello'])")
    assert "there is no transcript" in one_line_error(kernel.run(f"%%agent -m m --continue {tmp_path}/no.jsonl\nhi"))
    (tmp_path / "junk.jsonl").write_bytes(b"\xff\xfe junk\n")
    assert "holds no history" in one_line_error(kernel.run(f"%%agent -m m --continue {tmp_path}/junk.jsonl\nhi"))


# -- denials that say why, and are counted -----------------------------------------------------------------------------

def test_a_denial_in_ci_says_why_and_the_run_counts_it(kernel: KernelSession):
    kernel.ok("os.environ['CI'] = '1'\nm = ScriptedModel([Call('write_note', {'text': 'hi'}), 'done'])")
    cell = kernel.run("%%agent -m m --tools write_note\ngo")
    assert cell.status == "ok", cell.describe()
    [output] = kernel.value("outputs()")
    assert output == ("denied: write_note has side effects and nobody can approve it: CI is set, so nobody is asked; "
                      "pass --allow-writes to run it unasked")
    assert kernel.value("_agent.denied_calls") == 1
    assert kernel.value("_agent.summary") == "Answered after 2 rounds and 1 tool call (1 call denied)."
    final = cell.displays[-1]
    assert final["text/plain"].startswith("agent: complete · 2 rounds · 1 tool call · 1 call denied · ")
    panel_status = [m for m in cell.of_type("comm_msg") if "1 call denied" in json.dumps(m["content"])]
    assert panel_status, "the panel's status line counts the denied call"


# -- whose cap cut the response; identical not-run calls ---------------------------------------------------------------

def test_truncation_by_max_output_tokens_names_the_option(kernel: KernelSession):
    kernel.ok(f"os.environ['OPENAI_API_KEY'] = {TEST_KEY!r}")
    with ScriptedServer(Reply(chat_events(["The answer is"], finish="length"))) as server:
        cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m small --max-output-tokens 512\nhello")
    assert server.requests[0].body["max_tokens"] == 512
    (error,) = cell.errors
    assert error["ename"] == "Truncated"
    assert "reached this run's cap of 512 output tokens (--max-output-tokens 512" in error["evalue"], error
    kernel.ok("cut = ScriptedModel([Turn(text='The answer is', truncated='length')])")
    (error,) = kernel.run("%%agent -m cut\nhello").errors
    assert ("the server cut the model's response short (length): its own output limit (this run set no "
            "--max-output-tokens)") in error["evalue"]


def test_identical_not_run_calls_are_one_section_with_a_count(kernel: KernelSession):
    kernel.ok("m = ScriptedModel([Turn(calls=[Call('list_dir', {'path': '.'})] * 19, truncated='length')])")
    cell = kernel.run("%%agent -m m\nlook")
    final = cell.displays[-1]
    assert final["text/plain"].count('▸ list_dir(path=".") · not_run × 19') == 1, final["text/plain"]
    assert final["text/plain"].count("▸ list_dir") == 1
    assert final["text/html"].count("<details>") == 1 and "× 19" in final["text/html"]
    titles = [m for m in cell.of_type("comm_msg") if "not_run × 19" in json.dumps(m["content"], ensure_ascii=False)]
    assert titles, "the panel shows one section counting the 19 calls"


# -- the answer as Markdown (rendered by us) ---------------------------------------------------------------------------

def test_the_static_rendering_carries_the_answer_rendered_from_markdown(kernel: KernelSession):
    kernel.ok("m = ScriptedModel([Call('list_dir', {}), 'Found **two** files:\\n\\n- `a.txt`\\n- `b.txt`'])")
    cell = kernel.run("%%agent -m m\nlook")
    final = cell.displays[-1]
    page = final["text/html"]
    assert "<p>Found <strong>two</strong> files:</p>\n<ul>\n<li><code>a.txt</code></li>" in page
    assert page.startswith('<div class="agentkernel-record tex2jax_ignore mathjax_ignore">\n'
                           "<p><b>agent: complete · 2 rounds · 1 tool call")
    details = [line for line in page.split("\n") if line.startswith("<details>")]
    assert len(details) == 1  # the call's section, on one line
    # HTML and plain text only: a front end renders the HTML inside text/markdown live
    assert set(final) == {"text/html", "text/plain"}


# -- option lines expanded ---------------------------------------------------------------------------------------------

def test_option_lines_are_expanded_like_other_magics_lines(kernel: KernelSession, tmp_path: Path):
    kernel.ok(f"m = ScriptedModel(['first', 'second'])\npath = {str(tmp_path / 'run.jsonl')!r}\nsecs = 30\n"
              "name = 'm'")
    assert kernel.run("%%agent -m $name --record $path --max-seconds {secs * 2}\nhi").status == "ok"
    assert (tmp_path / "run.jsonl").exists()
    cell = kernel.run("%%agent --replay $path\nhi")
    assert cell.status == "ok", cell.describe()
    assert kernel.value("_agent.answer") == "first"
    refused = one_line_error(kernel.run("%%agent -m $name --no-expand\nhi"))
    assert "'$name' is not an object in this notebook" in refused


def test_no_expand_keeps_the_prompt_literal_and_its_help_says_both(kernel: KernelSession):
    kernel.ok("m = ScriptedModel(lambda req: req.history[-1]['content'])\nx = 5")
    kernel.ok("%%agent -m m --no-expand\n{x} and $x")
    assert kernel.value("_agent.answer") == "{x} and $x"
    kernel.ok("%%agent -m m\n{x} and $x")
    assert kernel.value("_agent.answer") == "5 and 5"
    (page,) = [p for p in kernel.run("%%agent?").reply["content"]["payload"] if p.get("source") == "page"]
    flat = " ".join(page["data"]["text/plain"].split())
    assert ("--no-expand keep {expression} and $name as written, in the prompt and in this option line (else both "
            "are expanded as IPython expands a magic line) (default: expanded") in flat


# -- %agent_mcp --mcp-config, _agent after a failed start --------------------------------------------------------------

def test_agent_mcp_reads_the_configuration_it_is_given(kernel: KernelSession):
    write_config(kernel.cwd / "trusted.json", {"mcpServers": {"clock": {"command": "mcp-server-time",
                                                                        "trustAnnotations": True}}})
    cell = kernel.run("%agent_mcp --mcp-config trusted.json")
    assert cell.status == "ok", cell.describe()
    assert "MCP servers in" in cell.stdout and "trusted.json" in cell.stdout
    assert "clock: stdio mcp-server-time · not running, trusts annotations" in cell.stdout
    assert "clock: stdio" in kernel.run("%agent_mcp --mcp-config trusted.json list").stdout
    stopped = kernel.run("%agent_mcp --mcp-config trusted.json stop clock")
    assert stopped.stdout.strip() == "MCP server 'clock' is not running"


def test_agent_holds_a_fatal_error_result_after_a_failed_start(kernel: KernelSession):
    kernel.ok("_agent = None")
    evalue = one_line_error(kernel.run("%%agent -m no_such_model_object\nhi"))
    assert kernel.value("type(_agent).__name__") == "LoopResult"
    assert kernel.value("_agent.status") == "fatal_error" and kernel.value("_agent.detail") == evalue
    kernel.ok("m = ScriptedModel(['hello'])")
    kernel.ok("%%agent -m m\nhi")
    kernel.run("%%agent -m m --max-iterations x\nhi")
    assert kernel.value("_agent.status") == "fatal_error" and "invalid int value" in kernel.value("_agent.detail")
    assert kernel.value("len(_agent.history)") == 2  # the earlier run's history, for --continue


# -- an approval nobody answers ----------------------------------------------------------------------------------------

def test_an_unanswered_approval_says_it_timed_out(kernel: KernelSession):
    kernel.ok("%config AgentMagics.approval_timeout = 0.5\n"
              "m = ScriptedModel([Call('write_note', {'text': 'hi'}), 'done'])")
    cell = kernel.run("%%agent -m m --tools write_note\ngo")
    assert cell.status == "ok", cell.describe()
    assert kernel.value("outputs()") == [
        "denied: write_note has side effects and got no answer within 0.5 s (approval_timeout)"]
    assert any("denied: no answer within 0.5 s (approval_timeout)" in json.dumps(m["content"])
               for m in cell.of_type("comm_msg"))
