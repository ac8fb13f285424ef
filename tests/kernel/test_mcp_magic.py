"""MCP servers through the magic in a real kernel, against servers nobody here wrote: ``mcp-server-time``,
``mcp-server-git`` (on a temporary repository) and the reference ``server-everything``.

A scripted model makes the calls; each test reads what the model was given (``_agent.history``), how the cell ended,
and checks that the kernel is alive and the history valid afterwards.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kernel_client import KernelSession, agent_kernel, kernel_env
from mcp_servers import TZ_CALL, git_repository, need, processes, servers, write_config
from timing import STOP_BOUND_BUSY

RESET = """\
%reset -f
import os
os.environ["AGENTKERNEL_NONINTERACTIVE"] = "1"
from agentkernel import Call, ScriptedModel, Turn, validate_history


def outputs():
    return [item["output"] for item in _agent.history if item["type"] == "function_call_output"]


def valid():
    validate_history(_agent.history)
    return True


def kill_children(marker):
    '''SIGKILL the kernel's child processes whose command line holds marker; their pids.'''
    import signal
    killed = []
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == os.getpid() and marker in cmdline:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory):
    need("mcp-server-time", "mcp-server-git", everything=True)
    root = tmp_path_factory.mktemp("mcp_magic")
    repo = git_repository(root / "repo")
    with agent_kernel(root) as ks:
        write_config(ks.cwd / ".mcp.json", servers(repo))
        write_config(ks.cwd / "broken.json", {"mcpServers": {"good": {"command": "x"}, "bad": {"args": ["y"]}}})
        ks.repo = repo  # type: ignore[attr-defined]
        yield ks


@pytest.fixture
def kernel(session: KernelSession) -> KernelSession:
    session.ok(RESET)
    return session


def agent(kernel: KernelSession, rounds: list[str], options: str, timeout: float = 60):
    """Run a cell whose scripted model makes ``rounds`` (each a ``Call(...)`` or a list of them), then says done."""
    kernel.ok(f"m = ScriptedModel([{', '.join(rounds)}, 'done'])")
    return kernel.run(f"%%agent -m m --tools read_file {options}\ngo", timeout=timeout)


def outputs(kernel: KernelSession) -> list[str]:
    assert kernel.value("valid()")
    return kernel.value("outputs()")


def alive(kernel: KernelSession) -> None:
    assert kernel.value("1 + 1") == 2


# -- approval rules ----------------------------------------------------------------------------------------------

def test_a_trusted_read_only_tool_runs_without_asking(kernel: KernelSession):
    cell = agent(kernel, [f"Call('time__convert_time', {TZ_CALL!r})"], "--mcp time")
    assert cell.status == "ok", cell.describe()
    [output] = outputs(kernel)
    assert '"timezone": "Asia/Tokyo"' in output and "21:00" in output, output


def test_without_trusted_annotations_every_call_asks(kernel: KernelSession):
    cell = agent(kernel, [f"Call('clock__convert_time', {TZ_CALL!r})"], "--mcp clock")
    assert cell.status == "ok", cell.describe()
    [output] = outputs(kernel)
    # the real reason (the annotations are not trusted) and both ways out; the run says a call was denied
    assert output.startswith("denied: clock__convert_time") and "AGENTKERNEL_NONINTERACTIVE is set" in output
    assert output.startswith("denied: clock__convert_time may have side effects: MCP server 'clock''s annotations "
                             "are not trusted, and nobody can approve it"), output
    assert "has side effects" not in output  # it is not known to have any
    assert '"trustAnnotations": true' in output and "--allow-writes" in output
    assert kernel.value("_agent.denied_calls") == 1
    assert "agent: complete · 2 rounds · 1 tool call · 1 call denied ·" in cell.displays[-1]["text/plain"]
    cell = agent(kernel, [f"Call('clock__convert_time', {TZ_CALL!r})"], "--mcp clock --allow-writes")
    assert "Asia/Tokyo" in outputs(kernel)[0]


def test_approve_in_the_panel_runs_an_untrusted_call(kernel: KernelSession):
    kernel.ok("del os.environ['AGENTKERNEL_NONINTERACTIVE']")
    kernel.ok(f"m = ScriptedModel([Call('clock__convert_time', {TZ_CALL!r}), 'done'])")
    cell = kernel.submit("%%agent -m m --tools read_file --mcp clock\ngo")
    comm = cell.wait_for_button("Approve")
    kernel.click(comm)
    cell.wait(60)
    assert cell.status == "ok", cell.describe()
    assert "Asia/Tokyo" in outputs(kernel)[0]


def test_git_reads_run_and_writes_ask(kernel: KernelSession):
    repo = str(kernel.repo)  # type: ignore[attr-defined]
    rounds = [f"Call('git__git_status', {{'repo_path': {repo!r}}})",
              f"Call('git__git_add', {{'repo_path': {repo!r}, 'files': ['draft.txt']}})",
              f"Call('git__git_reset', {{'repo_path': {repo!r}}})"]
    cell = agent(kernel, rounds, "--mcp git")
    assert cell.status == "ok", cell.describe()
    status, add, reset = outputs(kernel)
    assert "draft.txt" in status and "Untracked" in status
    assert add.startswith("denied: git__git_add") and reset.startswith("denied: git__git_reset")
    # The repository is untouched: draft.txt is still untracked.
    cell = agent(kernel, [f"Call('git__git_status', {{'repo_path': {repo!r}}})"], "--tools git__git_status")
    assert "Untracked" in outputs(kernel)[0]


# -- naming and choosing -----------------------------------------------------------------------------------------

def test_tools_takes_server_names_and_server_tool_names(kernel: KernelSession):
    kernel.ok("seen = []\nm = ScriptedModel(lambda req: seen.append([t['name'] for t in req.tools]) or 'ok')")
    kernel.ok("%%agent -m m --tools read_file,time__convert_time\ngo")
    kernel.ok("%%agent -m m --tools time\ngo")
    kernel.ok("%%agent -m m --tools list_dir --mcp time,everything\ngo")
    one, every_time, both = kernel.value("seen")
    assert one == ["read_file", "time__convert_time"]
    assert every_time == ["time__get_current_time", "time__convert_time"]
    assert both[:3] == ["list_dir", "time__get_current_time", "time__convert_time"]
    assert "everything__get-tiny-image" in both and all(len(name) <= 64 for name in both)


def test_config_and_the_environment_choose_the_servers_and_the_file(kernel: KernelSession):
    write_config(kernel.cwd / "alt.json", {"mcpServers": {"alt": {"command": "mcp-server-time"}}})
    kernel.ok("seen = []\nm = ScriptedModel(lambda req: seen.append([t['name'] for t in req.tools]) or 'ok')")
    kernel.ok("os.environ['AGENTKERNEL_MCP_CONFIG'] = 'alt.json'\n%config AgentMagics.mcp = ['alt']")
    try:
        kernel.ok("%%agent -m m --tools read_file\ngo")
        listing = kernel.ok("%agent_mcp").stdout
    finally:
        kernel.ok("del os.environ['AGENTKERNEL_MCP_CONFIG']\n%config AgentMagics.mcp = []")
    kernel.ok("%%agent -m m --tools read_file\ngo")
    with_alt, without = kernel.value("seen")
    assert with_alt == ["read_file", "alt__get_current_time", "alt__convert_time"] and without == ["read_file"]
    assert listing.startswith("MCP servers in alt.json:") and "alt: stdio mcp-server-time · running" in listing
    kernel.ok("%agent_mcp stop alt")


def test_unknown_servers_and_tools_are_config_errors(kernel: KernelSession):
    kernel.ok("m = ScriptedModel(['done'])")
    cell = kernel.run("%%agent -m m --mcp nosuch\ngo")
    [error] = cell.errors
    assert error["ename"] == "AgentConfigError" and "has no MCP server 'nosuch'" in error["evalue"]
    assert ".mcp.json" in error["evalue"] and "time, clock, git" in error["evalue"]
    cell = kernel.run("%%agent -m m --mcp time --tools time__nosuch\ngo")
    [error] = cell.errors
    assert "unknown tool 'time__nosuch'" in error["evalue"] and "time__convert_time" in error["evalue"]
    alive(kernel)


# -- lifecycle ---------------------------------------------------------------------------------------------------

def test_a_server_is_reused_listed_restarted_and_stopped(kernel: KernelSession):
    agent(kernel, [f"Call('time__convert_time', {TZ_CALL!r})"], "--mcp time")
    before = set(processes("mcp-server-time"))
    agent(kernel, [f"Call('time__convert_time', {TZ_CALL!r})"], "--mcp time")
    assert set(processes("mcp-server-time")) == before, "a second cell started another server"
    listing = kernel.ok("%agent_mcp").stdout
    assert "time: stdio mcp-server-time · running, trusts annotations" in listing, listing
    assert "    time__convert_time\n" in listing
    assert "missing: stdio agentkernel-no-such-command · not running" in listing
    restarted = kernel.ok("%agent_mcp restart time").stdout
    assert "MCP server 'time' restarted with 2 tools" in restarted
    assert set(processes("mcp-server-time")) != before
    assert "MCP server 'time' stopped" in kernel.ok("%agent_mcp stop time").stdout
    assert "time: stdio mcp-server-time · not running" in kernel.ok("%agent_mcp").stdout


def test_a_server_killed_mid_run_gives_an_error_output_and_starts_again(kernel: KernelSession):
    kernel.ok(f"""
def script(request):
    done = sum(item["type"] == "function_call_output" for item in request.history)
    if done == 1:
        assert kill_children("mcp-server-time")
    return Call("time__convert_time", {TZ_CALL!r}) if done < 3 else "done"
m = ScriptedModel(script)
""")
    cell = kernel.run("%%agent -m m --tools read_file --mcp time\ngo", timeout=90)
    assert cell.status == "ok", cell.describe()
    first, second, third = outputs(kernel)
    assert "Asia/Tokyo" in first and "Asia/Tokyo" in third
    assert second.startswith("error: MCPToolError: MCP server 'time' is gone") and "started again" in second


def test_a_server_that_never_answers_fails_the_cell_and_leaves_no_process(kernel: KernelSession):
    kernel.ok("m = ScriptedModel(['done'])")
    started = time.monotonic()
    cell = kernel.run("%%agent -m m --mcp hang\ngo", timeout=60)
    [error] = cell.errors
    assert error["ename"] == "AgentConfigError"
    assert "MCP server 'hang'" in error["evalue"] and "did not answer its handshake within 2 s" in error["evalue"]
    assert time.monotonic() - started < 15
    assert processes("agentkernel-hang") == []
    alive(kernel)


def test_a_bad_command_and_a_malformed_config_are_clear(kernel: KernelSession):
    kernel.ok("m = ScriptedModel(['done'])")
    [error] = kernel.run("%%agent -m m --mcp missing\ngo").errors
    assert error["ename"] == "AgentConfigError" and "MCP server 'missing'" in error["evalue"]
    scripts = kernel.value("__import__('sysconfig').get_path('scripts')")
    assert (f"the command 'agentkernel-no-such-command' is neither on PATH nor in this kernel's environment "
            f'({scripts}): install it there, or give its absolute path as "command"') in error["evalue"]
    [error] = kernel.run("%%agent -m m --mcp-config broken.json --mcp good\ngo").errors
    assert error["ename"] == "AgentConfigError"
    assert "broken.json: server 'bad':" in error["evalue"] and "command" in error["evalue"]
    [error] = kernel.run("%%agent -m m --mcp-config nothing-here.json --mcp time\ngo").errors
    assert "there is no MCP configuration file 'nothing-here.json'" in error["evalue"]
    alive(kernel)


def test_a_server_that_fails_at_start_is_one_error_line_without_its_token(kernel: KernelSession):
    """An error line as for any bad input (it was a full traceback on stderr), quoting the server's
    stderr with the token its entry configures redacted."""
    token = "tok-" + "0123456789abcdefghij" * 2
    code = "import os, sys; print('auth failed for', os.environ['SERVICE_TOKEN'], file=sys.stderr); sys.exit(3)"
    write_config(kernel.cwd / "dies.json", {"mcpServers": {"dies": {
        "command": "python", "args": ["-c", code], "env": {"SERVICE_TOKEN": token}}}})
    kernel.ok("m = ScriptedModel(['done'])")
    for line in ("%%agent -m m --mcp-config dies.json --mcp dies\ngo",
                 "%agent_mcp --mcp-config dies.json restart dies"):
        cell = kernel.run(line, timeout=60)
        [error] = cell.errors
        assert error["ename"] == "AgentConfigError" and len(error["traceback"]) == 1, cell.describe()
        assert "MCP server 'dies'" in error["evalue"] and "auth failed for [secret $SERVICE_TOKEN]" in error["evalue"]
        assert not [m for m in cell.messages if m["msg_type"] == "stream"], cell.describe()  # no traceback
        assert token[4:20] not in str(cell.messages)
    alive(kernel)


def test_servers_stop_when_the_kernel_shuts_down(tmp_path: Path):
    need("mcp-server-time")
    with agent_kernel(tmp_path) as ks:
        write_config(ks.cwd / ".mcp.json", {"mcpServers": {"time": {"command": "mcp-server-time",
                                                                    "args": ["--local-timezone", "Europe/Oslo"]}}})
        ks.ok("%agent_mcp restart time")
        assert processes("Europe/Oslo")
        ks.kc.stop_channels()
        ks.km.shutdown_kernel(now=False)  # a shutdown_request, as a front end's "Shut Down Kernel"
        ks.km.shutdown_kernel = lambda now=False: None  # (agent_kernel shuts it down again on exit)
    deadline = time.monotonic() + 10
    while processes("Europe/Oslo") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes("Europe/Oslo") == []


# -- server-everything: results, errors, long calls ----------------------------------------------------------------

def test_images_go_to_the_notebook_and_a_note_to_the_model(kernel: KernelSession):
    cell = agent(kernel, ["Call('everything__get-tiny-image')"], "--mcp everything --no-images")
    assert cell.status == "ok", cell.describe()
    [output] = outputs(kernel)
    assert "[image/png 20x20 from server everything]" in output and "iVBOR" not in output
    assert kernel.value("[i.get('images') for i in _agent.history if i['type'] == 'function_call_output']") == [None]
    images = cell.record_images()
    assert len(images) == 1 and images[0][2] == "[image/png 20x20 from server everything]"


def test_images_reach_the_model_as_images_where_the_model_takes_them(kernel: KernelSession):
    # A model object gets images unless --no-images (see Data work: Images); never as base64 in the text.
    cell = agent(kernel, ["Call('everything__get-tiny-image')"], "--mcp everything")
    assert cell.status == "ok", cell.describe()
    [output] = outputs(kernel)
    assert "[image/png 20x20 from server everything, sent to the model as an image]" in output
    assert "iVBOR" not in output
    sent = kernel.value("[i.get('images') for i in _agent.history if i['type'] == 'function_call_output'][0]")
    assert len(sent) == 1 and sent[0]["media_type"] == "image/png" and sent[0]["data"].startswith("iVBOR")
    assert sent[0]["width"] == sent[0]["height"] == 20
    assert len(cell.record_images()) == 1  # and the notebook shows it


def test_structured_content_errors_and_resources(kernel: KernelSession):
    rounds = ["Call('everything__get-structured-content', {'location': 'New York'})",
              "Call('everything__get-sum', {'a': 'one', 'b': 2})",
              "Call('everything__get-resource-links', {'count': 2})"]
    cell = agent(kernel, rounds, "--mcp everything")
    assert cell.status == "ok", cell.describe()
    structured, error, links = outputs(kernel)
    assert '"temperature":' in structured
    assert error.startswith("error: MCPToolError:") and "expected number" in error
    assert "[resource link" in links and "demo://resource/" in links


def test_server_errors_count_for_the_failure_guard(kernel: KernelSession):
    rounds = [f"Call('everything__get-sum', {{'a': 'x{i}', 'b': 1}})" for i in range(3)]  # distinct calls
    cell = agent(kernel, rounds, "--mcp everything --failure-rounds 3")
    [error] = cell.errors
    assert error["ename"] == "ToolFailure", cell.describe()
    assert kernel.value("valid()")


def test_the_server_env_is_minimal_plus_the_entry(kernel: KernelSession):
    kernel.ok("os.environ['OPENAI_API_KEY'] = 'sk-test-not-for-servers-123456'")
    try:
        cell = agent(kernel, ["Call('everything__get-env')"], "--mcp everything --tools read_file")
    finally:
        kernel.ok("del os.environ['OPENAI_API_KEY']")
    assert cell.status == "ok", cell.describe()
    [output] = outputs(kernel)
    assert "from-the-entry" in output and "PATH" in output
    assert "OPENAI_API_KEY" not in output and "sk-test-not-for-servers" not in output


LONG = "Call('everything__trigger-long-running-operation', {'duration': 30, 'steps': 30})"


def test_stop_cuts_a_long_running_call_and_the_next_cell_runs_at_once(kernel: KernelSession):
    agent(kernel, ["Call('everything__echo', {'message': 'warm'})"], "--mcp everything")  # started beforehand
    kernel.ok(f"m = ScriptedModel([{LONG}, 'done'])")
    cell = kernel.submit("%%agent -m m --tools read_file --mcp everything\ngo")
    stop = cell.wait_for_button("Stop")
    kernel.settle(1.0)
    clicked = kernel.click(stop)
    cell.wait(20)
    assert cell.idle_at - clicked < STOP_BOUND_BUSY, f"idle {cell.idle_at - clicked:.2f} s after Stop"
    assert kernel.value("_agent.status") == "aborted"
    assert outputs(kernel)[0].startswith("aborted:")
    started = time.monotonic()
    agent(kernel, ["Call('everything__echo', {'message': 'next'})"], "--mcp everything")
    assert time.monotonic() - started < 5 and outputs(kernel) == ["Echo: next"]


def test_max_seconds_cuts_a_long_running_call(kernel: KernelSession):
    kernel.ok(f"m = ScriptedModel([{LONG}, 'done'])")
    cell = kernel.submit("%%agent -m m --tools read_file --mcp everything --max-seconds 2\ngo")
    cell.wait(30)
    [error] = cell.errors
    assert error["ename"] == "HitWallClock"
    assert cell.idle_at - cell.sent_at < 2 + STOP_BOUND_BUSY + 1.0
    assert outputs(kernel)[0].startswith("aborted:")
    agent(kernel, ["Call('everything__echo', {'message': 'again'})"], "--mcp everything")
    assert outputs(kernel) == ["Echo: again"]


def test_a_call_past_its_timeout_is_an_error_output(session: KernelSession, kernel: KernelSession):
    config = servers(session.repo)  # type: ignore[attr-defined]
    config["mcpServers"] = {"slow": {**config["mcpServers"]["everything"], "timeout": 1}}
    write_config(session.cwd / "slow.json", config)
    kernel.ok(f"m = ScriptedModel([{LONG.replace('everything__', 'slow__')}, 'done'])")
    cell = kernel.run("%%agent -m m --tools read_file --mcp-config slow.json --mcp slow\ngo", timeout=30)
    assert cell.status == "ok", cell.describe()
    assert outputs(kernel) == ["error: slow__trigger-long-running-operation timed out after 1 s"]


def test_without_autoawait_mcp_says_why_it_cannot_run(kernel: KernelSession):
    kernel.ok("m = ScriptedModel(['done'])")
    kernel.ok("%autoawait off")
    try:
        cell = kernel.run("%%agent -m m --mcp time\ngo")
    finally:
        kernel.ok("%autoawait on")
    [error] = cell.errors
    assert error["ename"] == "AgentConfigError" and "%autoawait on" in error["evalue"]


def test_without_the_mcp_package_mcp_says_how_to_install_it(tmp_path: Path):
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "mcp.py").write_text("raise ImportError('mcp is hidden for this test')\n")
    (tmp_path / "k").mkdir()
    with agent_kernel(tmp_path / "k") as ks:
        ks.ok(f"import sys; sys.path.insert(0, {str(hidden)!r}); sys.modules.pop('mcp', None)")
        write_config(ks.cwd / ".mcp.json", {"mcpServers": {"time": {"command": "mcp-server-time"}}})
        ks.ok("from agentkernel import ScriptedModel\nm = ScriptedModel(['done'])")
        [error] = ks.run("%%agent -m m --mcp time\ngo").errors
    assert error["ename"] == "AgentConfigError" and "pip install 'jupyter-agentkernel[mcp]'" in error["evalue"]


def test_a_server_installed_in_the_kernels_environment_is_found_without_path(tmp_path: Path):
    """A kernel started by its full path (a kernelspec pointing into a venv) often lacks the venv's bin on PATH:
    mcp-server-time, installed beside the kernel's python, is still found."""
    need("mcp-server-time")
    import sys
    import sysconfig

    scripts = sysconfig.get_path("scripts")
    assert Path(scripts, "mcp-server-time").exists(), "mcp-server-time is installed in this environment"
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if d and d != scripts and not Path(d, "mcp-server-time").exists())
    (tmp_path / "cwd").mkdir()
    write_config(tmp_path / "cwd" / ".mcp.json", servers(tmp_path))
    ks = KernelSession(tmp_path / "cwd", kernel_env(tmp_path, PATH=path), kernel_name="python3")
    try:
        ks.ok("%load_ext agentkernel")
        assert ks.value("__import__('shutil').which('mcp-server-time')") is None
        assert ks.value("__import__('sys').executable") == sys.executable
        ks.ok(RESET)
        cell = agent(ks, [f"Call('time__convert_time', {TZ_CALL!r})"], "--mcp time")
        assert cell.status == "ok", cell.describe()
        assert "Asia/Tokyo" in outputs(ks)[0]
    finally:
        ks.shutdown()
