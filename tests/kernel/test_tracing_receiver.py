"""A trace receiver that is down, in a real kernel: OpenTelemetry's export thread logs its failures, which Python's
standard handling prints into whatever cell runs next. With the provider agentkernel makes, they go to the kernel's
own stderr instead, and the next ``%%agent`` run says it in one line, naming the endpoint without its credentials.

The kernels capture file descriptors as users' kernels do (``tests/harness/users_kernels.py``): what is written to
``sys.__stderr__`` or descriptor 2 would show in a cell, so a clean cell here is clean for users. Each kernel's own
stdout and stderr go to files, where the exporter's messages must be."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kernel_client import Cell, KernelSession, kernel_env

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

PASSWORD = "pa55w0rd-" + "Tq8" * 6


def _closed_port() -> int:
    """A port nothing listens on (bound, then let go): connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def two_runs(tmp_path: Path, **env: str) -> tuple[list[Cell], Cell]:
    """A kernel with ``env`` (spans exported every 50 ms): a ``%%agent`` run, plain cells until the export has
    failed in the background (and 1.5 s more, while the exporter retries and gives up), then a second run. The cells
    before the second run, and the second run."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    kernel = KernelSession(cwd, kernel_env(tmp_path, OTEL_BSP_SCHEDULE_DELAY="50", **env), log=tmp_path / "log")
    cells = []
    try:
        cells.append(kernel.ok("%load_ext agentkernel"))
        cells.append(kernel.ok("import time\nimport agentkernel.listeners.tracing as tracing\n"
                               "from agentkernel import ScriptedModel\n"
                               "first, second = ScriptedModel(['one']), ScriptedModel(['two'])"))
        cells.append(kernel.ok("%%agent -m first\ngo", timeout=60))
        deadline = time.monotonic() + 60
        while kernel.value("tracing.TROUBLE.first") is None:
            assert time.monotonic() < deadline, "the export never failed"
            cells.append(kernel.ok("time.sleep(0.2); print('plain')"))
        cells.append(kernel.ok("time.sleep(1.5); print('plain')"))
        second = kernel.run("%%agent -m second\ngo", timeout=60)
    finally:
        kernel.shutdown()
    for cell in cells:  # each must stay clean of what the exporter says
        assert cell.stderr == "", cell.describe()
        assert "traces" not in cell.stdout and "opentelemetry" not in cell.stdout, cell.describe()
    assert second.status == "ok" and second.stderr == "", second.describe()
    assert "opentelemetry.exporter" in (tmp_path / "log" / "stderr.txt").read_text()  # (where it went instead)
    return cells, second


def notes(cell: Cell) -> list[str]:
    return [line for line in cell.stdout.splitlines() if "traces did not reach" in line]


def test_a_receiver_that_is_down_is_one_line_in_the_next_run_and_nothing_in_other_cells(tmp_path: Path) -> None:
    port = _closed_port()
    cells, second = two_runs(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://agent:{PASSWORD}@127.0.0.1:{port}",
                             OTEL_EXPORTER_OTLP_TIMEOUT="1")
    (note,) = notes(second)
    prefix = f"agentkernel: traces did not reach http://127.0.0.1:{port}/v1/traces: "
    # The cause, when the exporter logged it (it does when it has time left to retry, and a loaded machine may not).
    assert note[len(prefix):] in ("[Errno 111] Connection refused",
                                  "Failed to export spans batch due to timeout, max retries or shutdown."), note
    everything = json.dumps([m for cell in [*cells, second] for m in cell.messages], default=str)
    assert PASSWORD not in everything
    assert PASSWORD not in (tmp_path / "log" / "stderr.txt").read_text()


def test_the_console_exporter_writes_to_the_kernels_own_stdout_not_into_cells(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    kernel = KernelSession(cwd, kernel_env(tmp_path, OTEL_TRACES_EXPORTER="console"), log=tmp_path / "log")
    try:
        kernel.ok("%load_ext agentkernel")
        kernel.ok("from agentkernel import ScriptedModel\nimport agentkernel.listeners.tracing as tracing\n"
                  "model = ScriptedModel(['hello'])")
        run = kernel.ok("%%agent -m model\ngo", timeout=60)
        flushed = kernel.ok("assert tracing._own.force_flush(10_000)")  # the export runs while this cell waits
    finally:
        kernel.shutdown()
    for cell in (run, flushed):
        assert "invoke_agent" not in cell.stdout + cell.stderr, cell.describe()
    assert '"name": "invoke_agent' in (tmp_path / "log" / "stdout.txt").read_text()


EXITS = """\
import sys, time
import agentkernel.listeners.tracing as tracing
tracing.tracer_provider().get_tracer("test").start_span("a span").end()
while not tracing.TROUBLE.retrying:  # the first export failed, and the exporter waits to try again
    time.sleep(0.05)
print("exiting", flush=True)
"""


def test_the_exit_does_not_wait_out_the_retries_of_a_receiver_that_is_down(tmp_path: Path) -> None:
    """At exit the provider flushes what is left, waiting for an export that retries until its deadline (here 60 s;
    10 s by default, which a kernel's restart would wait): an exporter whose receiver is down is stopped first."""
    env = {**kernel_env(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
           "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_EXPORTER_OTLP_TIMEOUT": "60"}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", EXITS], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "exiting\n", done.stderr
    assert time.monotonic() - start < 30, "the exit waited for the exporter's retries"
    assert "retrying" in done.stderr  # (the exporter's log, on the process's own stderr)


@contextmanager
def receiver(status: int) -> Iterator[tuple[int, list[bytes]]]:
    """An OTLP/HTTP receiver on 127.0.0.1 that answers every export with ``status``: its port, and the bodies it got."""
    received: list[bytes] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the standard library's name
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_port, received
    finally:
        server.shutdown()


def test_the_exit_still_sends_the_last_spans_to_a_receiver_that_is_up(tmp_path: Path) -> None:
    """The spans of the last seconds are exported at exit (the batch waits 5 s): stopping an exporter early is only
    for a receiver that is down."""
    with receiver(200) as (port, received):
        env = {**kernel_env(tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
        code = ("import agentkernel.listeners.tracing as tracing\n"
                "tracing.tracer_provider().get_tracer('test').start_span('the last span').end()\n")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert any(b"the last span" in body for body in received)


def test_a_receiver_that_refuses_the_token_is_one_line_with_its_status(tmp_path: Path) -> None:
    """A receiver that answers 401 (a wrong or missing OTEL_EXPORTER_OTLP_HEADERS): the next run says so, and the
    header's value is in no cell."""
    token = "otlp-" + "Zk4" * 8
    with receiver(401) as (port, received):
        cells, second = two_runs(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                                 OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer {token}")
    assert any(b"invoke_agent" in body for body in received)  # it was sent, and refused
    assert notes(second) == [f"agentkernel: traces did not reach http://127.0.0.1:{port}/v1/traces: Failed to export "
                             "spans batch code: 401, reason: Unauthorized"], second.describe()
    assert token not in json.dumps([m for cell in [*cells, second] for m in cell.messages], default=str)
