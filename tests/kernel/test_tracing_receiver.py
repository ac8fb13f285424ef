"""A trace receiver that is down, in a real kernel: OpenTelemetry's export thread logs its failures, which Python's
standard handling prints into whatever cell runs next. With the provider agentkernel makes, they go to the kernel's
own stderr instead, and the next ``%%agent`` run says it in one line, naming the endpoint without its credentials."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from kernel_client import KernelSession, kernel_env

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

PASSWORD = "pa55w0rd-" + "Tq8" * 6


def _closed_port() -> int:
    """A port nothing listens on (bound, then let go): connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_receiver_that_is_down_is_one_line_in_the_next_run_and_nothing_in_other_cells(tmp_path: Path) -> None:
    port = _closed_port()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = kernel_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://agent:{PASSWORD}@127.0.0.1:{port}",
                     OTEL_BSP_SCHEDULE_DELAY="50", OTEL_EXPORTER_OTLP_TIMEOUT="1")
    kernel = KernelSession(cwd, env)
    cells = []
    try:
        cells.append(kernel.ok("%load_ext agentkernel"))
        cells.append(kernel.ok("import time\nimport agentkernel.tracing as tracing\n"
                               "from agentkernel import ScriptedModel\n"
                               "first, second = ScriptedModel(['one']), ScriptedModel(['two'])"))
        cells.append(kernel.ok("%%agent -m first\ngo", timeout=60))
        # The export fails in the background: wait (cell by cell, each of which must stay clean) until it has.
        deadline = time.monotonic() + 60
        while kernel.value("tracing.TROUBLE.first") is None:
            assert time.monotonic() < deadline, "the export never failed"
            cells.append(kernel.ok("time.sleep(0.2); print('plain')"))
        cells.append(kernel.ok("time.sleep(1.5); print('plain')"))  # while the exporter retries and gives up
        second = kernel.run("%%agent -m second\ngo", timeout=60)
    finally:
        kernel.shutdown()
    for cell in cells:
        assert cell.stderr == "", cell.describe()
        assert "traces" not in cell.stdout and "opentelemetry" not in cell.stdout, cell.describe()
    assert second.status == "ok", second.describe()
    notes = [line for line in second.stdout.splitlines() if "traces did not reach" in line]
    assert len(notes) == 1, second.describe()
    prefix = f"agentkernel: traces did not reach http://127.0.0.1:{port}/v1/traces: "
    # The cause, when the exporter logged it (it does when it has time left to retry, and a loaded machine may not).
    assert notes[0][len(prefix):] in ("[Errno 111] Connection refused",
                                      "Failed to export spans batch due to timeout, max retries or shutdown."), notes
    assert second.stderr == ""
    everything = json.dumps([m for cell in [*cells, second] for m in cell.messages], default=str)
    assert PASSWORD not in everything


def test_the_console_exporter_writes_to_the_kernels_own_stdout_not_into_cells(tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    kernel = KernelSession(cwd, kernel_env(tmp_path, OTEL_TRACES_EXPORTER="console"))
    try:
        kernel.ok("%load_ext agentkernel")
        kernel.ok("from agentkernel import ScriptedModel\nimport agentkernel.tracing as tracing\n"
                  "model = ScriptedModel(['hello'])")
        run = kernel.ok("%%agent -m model\ngo", timeout=60)
        flushed = kernel.ok("assert tracing._own.force_flush(10_000)")  # the export runs while this cell waits
    finally:
        kernel.shutdown()
    for cell in (run, flushed):
        assert "invoke_agent" not in cell.stdout + cell.stderr, cell.describe()
