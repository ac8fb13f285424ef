"""Traces reach a real OTLP receiver: Arize Phoenix, started by the test on 127.0.0.1, gets a `%%agent` run from a
real kernel configured only by the standard environment (OTEL_EXPORTER_OTLP_ENDPOINT), and its own REST API gives
the spans back: one trace, the run, its requests and its calls, with their GenAI attributes.

Phoenix is a whole application (about 850 MB installed, several minutes to install), so it lives in an environment
of its own, which scripts/test.sh makes (``arize-phoenix==20.26.1`` in ``~/.cache/agentkernel/phoenix-venv``, or
``$AGENTKERNEL_PHOENIX_VENV``): the test runs the ``phoenix`` command named by ``$PHOENIX``, found on ``PATH`` or in
that venv, and where there is none it skips, saying so (it fails under CI, as the MCP tests do).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kernel_client import KernelSession, kernel_env

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

VENV = Path(os.environ.get("AGENTKERNEL_PHOENIX_VENV") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentkernel" / "phoenix-venv")
"""Where scripts/test.sh installs Phoenix (the same rule)."""
PHOENIX = os.environ.get("PHOENIX") or shutil.which("phoenix") or (
    str(VENV / "bin" / "phoenix") if (VENV / "bin" / "phoenix").exists() else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own loopback receiver
        return json.loads(response.read())


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if PHOENIX is None:
        message = "Arize Phoenix is not installed: run scripts/test.sh (or set $PHOENIX to its `phoenix` command)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    port = _free_port()
    folder = tmp_path_factory.mktemp("phoenix")
    env = {**os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(_free_port()),
           "PHOENIX_WORKING_DIR": str(folder)}
    log = (folder / "phoenix.log").open("w")
    server = subprocess.Popen([PHOENIX, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=2).close()  # noqa: S310
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"Phoenix did not start: {(folder / 'phoenix.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_a_run_in_a_real_kernel_reaches_phoenix_as_one_trace(phoenix: str, tmp_path: Path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = kernel_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=phoenix, OTEL_BSP_SCHEDULE_DELAY="100",
                     OTEL_SERVICE_NAME="agentkernel-test")
    kernel = KernelSession(cwd, env)
    try:
        kernel.ok("%load_ext agentkernel")
        kernel.ok("from agentkernel import ScriptedModel, Call\n"
                  "m = ScriptedModel([[Call('list_dir', {'path': '.'}), Call('list_dir', {'path': '..'})], "
                  "'two folders listed'])")
        cell = kernel.run("%%agent -m m --tools list_dir\nlist the folders", timeout=60)
        assert cell.status == "ok", cell.describe()
        run_id = kernel.value("_agent.run_id")
        assert kernel.value("'opentelemetry' in __import__('sys').modules") is True
        # Exported in the background, in batches (every 0.1 s here): read back while the kernel lives.
        deadline = time.monotonic() + 60
        while True:
            spans = _get(f"{phoenix}/v1/projects/default/spans?limit=100")["data"]
            runs = [s for s in spans if s["attributes"].get("gen_ai.agent.id") == run_id]
            trace = runs[0]["context"]["trace_id"] if runs else None
            ours = [s for s in spans if s["context"]["trace_id"] == trace]
            if len(ours) >= 5 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        kernel.shutdown()
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in ours:
        by_name.setdefault(span["name"], []).append(span)
    (run,) = by_name["invoke_agent agentkernel"]
    calls = by_name["execute_tool list_dir"]
    assert len(by_name["chat scripted"]) == 2 and len(calls) == 2 and len(ours) == 5
    assert all(s["parent_id"] == run["context"]["span_id"] for s in ours if s is not run)
    assert run["parent_id"] is None
    assert run["attributes"]["agentkernel.status"] == "complete"
    assert run["attributes"]["gen_ai.request.model"] == "scripted"
    assert run["attributes"]["gen_ai.usage.output_tokens"] > 0
    assert len({s["attributes"]["gen_ai.tool.call.id"] for s in calls}) == 2
    # ".." is outside the root the file tools keep to: that call failed, and its span says so.
    assert sorted(s["attributes"]["agentkernel.tool.status"] for s in calls) == ["error", "ok"]
    assert [s["status_code"] for s in calls if s["attributes"]["agentkernel.tool.status"] == "error"] == ["ERROR"]
    # No content unless asked: neither the prompt nor the answer is in any span.
    assert "list the folders" not in json.dumps(ours) and "two folders listed" not in json.dumps(ours)
