"""What ``run_python``'s code writes to file descriptors 1 and 2 (a subprocess, ``os.system``, ``!echo``,
``os.write``), in a real kernel that captures them as users' kernels do: it is part of the call's
output to the model, as the cell would show it, redacted; no iopub message and no request body holds a secret raw;
and a child that writes after its call ended writes to the kernel's own log, redacted, never into a user's cell.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_client import Cell, KernelSession, kernel_env
from openai_server import TEST_KEY, Reply, ScriptedServer, responses_events
from secret_pieces import leaked

GH = "ghp_DescriptorTokenValue0123456789abcdef"
NOTEBOOK = "notebook-secret-held-in-a-variable-42"
VALUES = {"GITHUB_TOKEN": GH, "nb_secret": NOTEBOOK}

SETUP = f"""\
import os, subprocess
os.environ.update(GITHUB_TOKEN={GH!r}, OPENAI_API_KEY={TEST_KEY!r})
nb_secret = {NOTEBOOK!r}
"""

CODE = """\
import os, subprocess, sys
print("python first")
subprocess.run('echo child says $GITHUB_TOKEN; echo child err $GITHUB_TOKEN >&2; echo plain child output',
               shell=True, check=True)
os.system(f"echo system says {nb_secret}")
os.write(2, f"fd two {nb_secret}\\n".encode())
!echo shell line $GITHUB_TOKEN
subprocess.run(["echo", "to sys.stdout's descriptor"], stdout=sys.stdout, check=True)
print("python last")"""


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory, server: ScriptedServer) -> Iterator[KernelSession]:
    root = tmp_path_factory.mktemp("descriptors_kernel")
    (root / "cwd").mkdir()
    ks = KernelSession(root / "cwd", kernel_env(root), log=root / "log")
    try:
        ks.ok("%load_ext agentkernel")
        ks.ok(SETUP + f"os.environ['OPENAI_BASE_URL'] = {server.url!r}")
        ks.ok("%agent_secret nb_secret")
        yield ks
    finally:
        ks.shutdown()


def log(kernel: KernelSession) -> str:
    folder = kernel.cwd.parent / "log"
    return "".join((folder / f"{name}.txt").read_text(errors="replace") for name in ("stdout", "stderr"))


def run_code(kernel: KernelSession, server: ScriptedServer, code: str, call_id: str = "c1") -> tuple[Cell, str]:
    """One ``%%agent`` run whose one call is ``run_python(code)``: the cell and the call's output to the model."""
    arguments = json.dumps({"code": code})
    server.add(Reply(responses_events([], [(call_id, "run_python", arguments)])), Reply(responses_events(["done"])))
    cell = kernel.run("%%agent --allow-writes --tools run_python\nrun it", timeout=90)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert not server.replies, "the run did not ask for every reply"
    (output,) = [item["output"] for item in server.requests[-1].body["input"]
                 if item.get("type") == "function_call_output" and item["call_id"] == call_id]
    return cell, output


def leaks(text: str) -> list[str]:
    return [name for name, value in VALUES.items() if leaked(value, text)]


def test_what_children_write_reaches_the_model_redacted_and_no_view_raw(kernel: KernelSession,
                                                                         server: ScriptedServer) -> None:
    cell, output = run_code(kernel, server, CODE)
    stdout, _, rest = output.partition("[stderr]")
    assert output.startswith("[stdout]\npython first\n"), output
    for line in ("child says [secret $GITHUB_TOKEN]", "plain child output", "system says [secret $nb_secret]",
                 "shell line [secret $GITHUB_TOKEN]", "to sys.stdout's descriptor", "python last"):
        assert line in output, output
    assert "child err [secret $GITHUB_TOKEN]" in output and "fd two [secret $nb_secret]" in output, output
    # No view holds a value: the model's requests, any iopub message of the run, the record, the kernel's log.
    assert not leaks(json.dumps([r.body for r in server.requests])), leaks(json.dumps(server.requests[-1].body))
    shown = json.dumps([m["content"] for m in cell.messages])
    assert not leaks(shown) and "plain child output" in shown, cell.describe()
    assert not leaks(log(kernel)) and "plain child output" not in log(kernel)
    # The cell itself shows no stream of the code's: the call's section does.
    assert "plain child output" not in cell.stdout + cell.stderr
    after = kernel.ok("print('a plain cell')")
    assert after.stdout == "a plain cell\n" and after.stderr == "", after.describe()


def test_a_child_that_writes_after_its_call_writes_to_the_kernels_log_redacted(kernel: KernelSession,
                                                                               server: ScriptedServer) -> None:
    fifo = kernel.cwd / "go"
    kernel.ok(f"os.mkfifo({str(fifo)!r})")
    code = (f"child = subprocess.Popen('read line < {fifo}; echo late $GITHUB_TOKEN; echo late err {NOTEBOOK} >&2',"
            " shell=True)\nprint('started')")
    _, output = run_code(kernel, server, code, "c2")
    assert "started" in output and "late" not in output, output
    released = kernel.ok(f"open({str(fifo)!r}, 'w').write('go\\n')\nchild.wait()")
    deadline = time.monotonic() + 30
    while "late err [secret $nb_secret]" not in log(kernel) or "late [secret $GITHUB_TOKEN]" not in log(kernel):
        assert time.monotonic() < deadline, log(kernel)
        kernel.pump(0.05)
    later = kernel.ok("print('afterwards')")
    for cell in (released, later):
        assert "late" not in cell.stdout + cell.stderr, cell.describe()
    assert not leaks(log(kernel))


@pytest.mark.parametrize("how", ["error", "max_seconds", "stop_button", "interrupt"])
def test_every_way_a_call_ends_gives_the_descriptors_back(kernel: KernelSession, server: ScriptedServer,
                                                           how: str) -> None:
    """A call that raises, or that the run's --max-seconds, Stop or the interrupt ends mid-way: what it wrote is in its
    output (raised) or nowhere raw, and the next user cell's own child output is the cell's again."""
    marker = kernel.cwd / f"started-{how}"
    # The marker is made after os.system returns: while system() runs, the C library ignores SIGINT in the whole
    # process, so an interrupt sent the moment a child's `touch` made the marker was lost (seen under load).
    code = (f"os.system('echo before the end $GITHUB_TOKEN')\nopen({str(marker)!r}, 'w').close()\n"
            + ("raise ValueError('the end')" if how == "error" else "import time\nwhile True: time.sleep(0.01)"))
    replies = [Reply(responses_events([], [("c3", "run_python", json.dumps({"code": code}))]))]
    server.add(*replies, *([Reply(responses_events(["done"]))] if how == "error" else []))
    options = "--allow-writes --tools run_python" + (" --max-seconds 4" if how == "max_seconds" else "")
    cell = kernel.submit(f"%%agent {options}\nrun it")
    if how in ("stop_button", "interrupt"):
        stop = cell.wait_for_button("Stop")
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, cell.describe()
            kernel.pump(0.05)
        if how == "stop_button":
            kernel.click(stop)
        else:
            kernel.interrupt()
    cell.wait(90)
    expected = {"error": "complete", "max_seconds": "hit_wall_clock"}.get(how, "aborted")
    assert kernel.value("_agent.status") == expected, cell.describe()
    assert not leaks(json.dumps([m["content"] for m in cell.messages])), cell.describe()
    if how == "error":
        output = kernel.value("[i['output'] for i in _agent.history if i.get('type') == 'function_call_output'][0]")
        assert "before the end [secret $GITHUB_TOKEN]" in output and "ValueError: the end" in output, output
    after = kernel.ok("os.system('echo a user child'); os.write(2, b'user fd two\\n')")
    deadline = time.monotonic() + 30
    while "a user child" not in after.stdout or "user fd two" not in after.stderr:  # (ipykernel forwards every 0.2 s)
        assert time.monotonic() < deadline, after.describe()
        kernel.pump(0.05)
    assert not leaks(log(kernel))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=1, max_value=len(GH) - 1), min_size=1, max_size=4, unique=True),
       stderr=st.booleans(), newlines=st.booleans())
def test_a_secret_split_across_writes_and_lines_never_reaches_the_model(kernel: KernelSession, server: ScriptedServer,
                                                                         cuts: list[int], stderr: bool,
                                                                         newlines: bool) -> None:
    """A child writes the token in pieces (separate writes, on one line or split over lines): the call's output
    holds the marker where the pieces join on one line, and no run of 16 characters of the token anywhere."""
    bounds = [0, *sorted(cuts), len(GH)]
    pieces = [f"os.environ['GITHUB_TOKEN'][{a}:{b}]" for a, b in zip(bounds, bounds[1:], strict=False)]
    end, fd = ("\\n" if newlines else ""), (2 if stderr else 1)
    code = "import os\n" + "\n".join(f"os.write({fd}, ({piece} + '{end}').encode())" for piece in pieces)
    code = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {code!r}], check=True)"
    cell, output = run_code(kernel, server, code, "c4")
    assert not leaks(output + json.dumps(server.requests[-1].body)), output
    assert not leaks(json.dumps([m["content"] for m in cell.messages]))
    if not newlines:
        assert "[secret $GITHUB_TOKEN]" in output, output
