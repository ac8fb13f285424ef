"""The live panel's cost in a real kernel: ``%%agent`` against a plain ``await run()``, one tool call per round.

Not a test: run ``PYTHONPATH=. python benchmarks/panel.py`` (``--quick`` for one repeat and three RSS runs). A kernel
is started with ``jupyter_client`` (as the kernel tests do, see ``tests/support/kernel_client.py``); a scripted
model calls an async no-op tool N times, then answers. For N = 100 and 1000 it prints:

- kernel ms per round for the ``%%agent`` cell (live panel, static rendering at the end) and for a plain
  ``await agentkernel.run(...)`` cell in the same kernel, timed inside the kernel from ``pre_run_cell`` to
  ``post_run_cell`` (best of the repeats, interleaved so noise hits both), and their ratio; also the kernel
  process's CPU ms per round over the same span (all its threads), which a busy machine disturbs less;
- iopub messages and bytes per round of the ``%%agent`` cell (bytes: header, parent header, metadata and content
  as JSON, as they go over the wire, plus any buffers);
- the widget models the run left alive in the kernel (``ipywidgets.widgets.widget._instances``);
- the kernel's RSS after each of ten 1000-call ``%%agent`` runs in a row: its growth per run after the first
  (flat when a finished run leaves nothing behind), and the widget models alive at the end.
- a 1000-call ``%%agent`` run with tracing off and on (spans to a provider the user set, in memory), without a
  transcript and with one: ms and kernel CPU ms per round, and their ratios.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from kernel_client import Cell, KernelSession, agent_kernel  # noqa: E402

SETUP = """\
%autoawait True
import gc, time, ipywidgets, agentkernel
from agentkernel import Call, ScriptedModel, tool

@tool
async def noop(i: int) -> str:
    "Do nothing, quickly."
    return "ok"

def script(n):
    return ScriptedModel([Call("noop", {"i": i}) for i in range(n)] + ["done"])

_times = []
get_ipython().events.register("pre_run_cell", lambda info: _times.append((time.perf_counter(), time.process_time())))
get_ipython().events.register("post_run_cell", lambda result: _times.append((time.perf_counter(), time.process_time())))

def rss_mb():
    gc.collect()
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
"""


def wire_bytes(msg: dict) -> int:
    parts = (msg["header"], msg["parent_header"], msg["metadata"], msg["content"])
    return sum(len(json.dumps(p, default=str)) for p in parts) + sum(len(b) for b in msg.get("buffers") or [])


def timed(kernel: KernelSession, code: str) -> tuple[float, float, Cell]:
    """Run ``code``; return the kernel's wall and CPU seconds from pre_run_cell to post_run_cell, and the cell."""
    cell = kernel.run(code, timeout=600)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    (wall0, cpu0), (wall1, cpu1) = kernel.value("_times[-2:]")
    return wall1 - wall0, cpu1 - cpu0, cell


def agent_run(kernel: KernelSession, n: int) -> tuple[float, float, Cell, int]:
    kernel.ok(f"model = script({n}); _before = len(ipywidgets.widgets.widget._instances)")
    wall, cpu, cell = timed(kernel, "%%agent -m model --tools noop\ngo")
    assert kernel.value("_agent.tool_calls") == n
    alive = kernel.value("len(ipywidgets.widgets.widget._instances) - _before")
    return wall, cpu, cell, alive


def plain_run(kernel: KernelSession, n: int) -> tuple[float, float]:
    kernel.ok(f"model = script({n})")
    wall, cpu, _ = timed(kernel, "_plain = await agentkernel.run('go', model=model, tools=[noop])")
    assert kernel.value("_plain.tool_calls") == n
    return wall, cpu


TRACING = """\
import os
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exported = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(BatchSpanProcessor(exported))
trace.set_tracer_provider(_provider)  # the user's provider: %%agent adds its spans to it
"""


def tracing(kernel: KernelSession, repeats: int, folder: str) -> dict[str, tuple[float, float]]:
    """Best wall and CPU ms per round of a 1000-call ``%%agent`` run with tracing off and on (spans to a provider the
    user set, through a ``BatchSpanProcessor`` to memory: it exports every 512 spans as the run goes, and the last few
    after the cell), without a transcript (as the rows above) and with one (``%%agent``'s default), interleaved."""
    kernel.ok(TRACING)
    best: dict[str, tuple[float, float]] = {}
    for _ in range(repeats):
        for transcripts in ("", folder):
            kernel.ok(f"%config AgentMagics.transcripts = {transcripts!r}")
            for on in (False, True):
                kernel.ok(f"os.environ['OTEL_SDK_DISABLED'] = {str(not on).lower()!r}; exported.clear()")
                kernel.ok("model = script(1000)")
                wall, cpu, _ = timed(kernel, "%%agent -m model --tools noop\ngo")
                kernel.ok("_provider.force_flush()")
                assert kernel.value("len(exported.get_finished_spans())") == (2002 if on else 0)
                key = f"{'on' if on else 'off'}{', transcript' if transcripts else ''}"
                wall_was, cpu_was = best.get(key, (float("inf"), float("inf")))
                best[key] = (min(wall_was, wall), min(cpu_was, cpu))
    return {key: (wall / 1000 * 1e3, cpu / 1000 * 1e3) for key, (wall, cpu) in best.items()}


def main() -> None:
    quick = "--quick" in sys.argv
    repeats, rss_runs = (1, 3) if quick else (3, 10)
    with agent_kernel(Path(tempfile.mkdtemp(prefix="agentkernel-bench-"))) as kernel:
        kernel.ok(SETUP)
        kernel.ok("%config AgentMagics.transcripts = False")
        agent_run(kernel, 20)  # warm up: imports, first widgets
        plain_run(kernel, 20)
        rows = []
        for n in (100, 1000):
            panel = plain = panel_cpu = plain_cpu = float("inf")
            for _ in range(repeats):
                wall, cpu, cell, alive = agent_run(kernel, n)
                panel, panel_cpu = min(panel, wall), min(panel_cpu, cpu)
                wall, cpu = plain_run(kernel, n)
                plain, plain_cpu = min(plain, wall), min(plain_cpu, cpu)
            messages = cell.messages
            rows.append((n, panel / n * 1e3, plain / n * 1e3, panel_cpu / n * 1e3, plain_cpu / n * 1e3,
                         len(messages) / n, sum(wire_bytes(m) for m in messages) / n, alive))

        rss = []
        for _ in range(rss_runs):
            agent_run(kernel, 1000)
            rss.append(kernel.value("rss_mb()"))
        first, last = rss[0], rss[-1]
        total_widgets = kernel.value("len(ipywidgets.widgets.widget._instances)")
        traced = tracing(kernel, repeats, tempfile.mkdtemp(prefix="agentkernel-transcripts-"))

    print(f"{'N':>5} {'panel ms/round':>15} {'plain ms/round':>15} {'ratio':>6} {'panel CPU':>10} "
          f"{'plain CPU':>10} {'msgs/round':>11} {'bytes/round':>12} {'widgets left':>13}")
    for n, panel_ms, plain_ms, panel_cpu, plain_cpu, msgs, nbytes, alive in rows:
        print(f"{n:>5} {panel_ms:>15.3f} {plain_ms:>15.3f} {panel_ms / plain_ms:>5.1f}x {panel_cpu:>10.3f} "
              f"{plain_cpu:>10.3f} {msgs:>11.2f} {nbytes:>12.0f} {alive:>13}")
    print(f"bytes/round at N=1000 vs N=100: {rows[1][6] / rows[0][6]:.2f}x")
    for transcript in ("", ", transcript"):
        (off, off_cpu), (on, on_cpu) = traced["off" + transcript], traced["on" + transcript]
        print(f"%%agent{transcript or ''}, 1000 rounds, tracing off / on (spans to memory): {off:.3f} / {on:.3f} ms "
              f"per round ({on / off:.2f}x), kernel CPU {off_cpu:.3f} / {on_cpu:.3f} ({on_cpu / off_cpu:.2f}x)")
    print(f"kernel RSS after {rss_runs} runs of 1000 calls: {last:.1f} MB, after the first: {first:.1f} MB "
          f"(+{last - first:.1f} MB, {(last - first) / (rss_runs - 1) * 1024:+.0f} KB per run after the first; "
          f"after each: {', '.join(f'{m:.1f}' for m in rss)}); widget models in the kernel: {total_widgets}")


if __name__ == "__main__":
    start = time.monotonic()
    main()
    print(f"({time.monotonic() - start:.0f} s)")
