"""Background runs in a real kernel: what they cost the user's cells, what they cost per round, and what becomes of
the model's stream while a cell blocks the kernel's event loop.

Not a test: run ``PYTHONPATH=. python benchmarks/background.py`` (``--quick``: fewer repeats). A kernel is started
with ``jupyter_client`` (as the kernel tests do); the model is the real ``openai`` SDK against the loopback server of
``tests/support/openai_server.py``. It prints three ratios, each measured within this one run:

1. **A trivial cell's round trip while a background run streams at full rate ÷ the same cell idle** (goal ≤ 1.5×):
   ``x = 1`` sent from the client, from the ``execute_request`` to the reply, median of many, while a
   ``%%agent --background`` run reads a long stream of small deltas with no delay (its live panel updating), and
   with no run.
2. **A background run's loop cost per round ÷ a foreground run's** (goal ≤ 1.2×): a scripted model calling an async
   no-op tool N times, ``%%agent --background`` then ``%agent_wait`` against ``%%agent``, kernel CPU per round.
3. **The model's stream during a 10 s blocking cell** (goal: it keeps arriving): the server sends a delta every
   50 ms for 15 s; 2.5 s in, a cell runs ``time.sleep(10)``. Of the deltas the server sent while the cell ran, the
   share the kernel read from the socket while it ran, with the stream read on the kernel's loop (as a foreground
   run reads it) and on the model I/O thread (as a background run reads it, :mod:`agentkernel.models.off_loop`).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from kernel_client import KernelSession, agent_kernel  # noqa: E402
from openai_server import Reply, ScriptedServer, responses_events  # noqa: E402

STAMPED = """\
import asyncio, os, time, agentkernel
from agentkernel.models.openai_responses import OpenAIResponsesModel
from agentkernel.models.off_loop import OffLoopModel

class Stamped:
    "The adapter, with the time each event was read from it (on whichever thread reads the stream)."
    def __init__(self, inner):
        self.inner, self.name, self.read = inner, inner.name, []
    async def stream(self, request):
        async for event in self.inner.stream(request):
            self.read.append(time.monotonic())
            yield event
"""


class Paced(list):
    """SSE events the server sends one every ``delay`` seconds, keeping the time each was sent."""

    def __init__(self, events: list[str], delay: float):
        super().__init__(events)
        self.delay = delay
        self.sent: list[float] = []

    def __iter__(self) -> Iterator[str]:
        for event in super().__iter__():
            time.sleep(self.delay)
            self.sent.append(time.monotonic())
            yield event


def blocking_cell(kernel: KernelSession, off_loop: bool, seconds: float = 10.0) -> tuple[float, float, int]:
    """The share of the deltas sent during a ``time.sleep(seconds)`` cell that the kernel read during it; the seconds
    from the cell's end to the run's; the deltas."""
    deltas = int((seconds + 5) / 0.05)
    paced = Paced(responses_events([f"w{i} " for i in range(deltas)]), 0.05)
    with ScriptedServer(Reply(events=paced)) as server:  # type: ignore[arg-type]
        wrap = "OffLoopModel(stamped)" if off_loop else "stamped"
        kernel.ok(f"stamped = Stamped(OpenAIResponsesModel('m', base_url={server.url!r}, api_key='k'))\n"
                  f"run = asyncio.ensure_future(agentkernel.run('go', model={wrap}))")
        while len(paced.sent) < int(2.5 / 0.05):
            kernel.pump(0.05)
        cell = kernel.run(f"_t0 = time.monotonic(); time.sleep({seconds}); _t1 = time.monotonic()", timeout=60)
        assert cell.status == "ok", cell.describe()
        kernel.ok("await run")
        t0, t1, ended = kernel.value("(_t0, _t1, max(stamped.read))")
        sent = [t for t in paced.sent if t0 <= t <= t1]
        read = [t for t in kernel.value("stamped.read") if t0 <= t <= t1]
        return len(read) / max(len(sent), 1), ended - t1, len(sent)


ROUNDS = """\
import time
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
_runs = get_ipython().magics_manager.registry["AgentMagics"].state.background
"""


def round_trips(kernel: KernelSession, n: int) -> list[float]:
    """Seconds from sending ``x = 1`` to its reply, ``n`` times."""
    times = []
    for _ in range(n):
        cell = kernel.run("x = 1", timeout=60)
        assert cell.status == "ok"
        assert cell.idle_at is not None
        times.append(cell.idle_at - cell.sent_at)
    return times


class Endless(list):
    """A Responses stream of distinct words, one every ``delay`` seconds (0: as fast as the socket takes them), until
    :attr:`stop` is set."""

    def __init__(self, delay: float = 0.0) -> None:
        self.template = responses_events(["w0 "])
        super().__init__(self.template)
        self.stop = threading.Event()
        self.delay = delay

    def __iter__(self) -> Iterator[str]:
        head, delta, tail = self.template[:2], self.template[2], self.template[3:]
        yield from head
        i = 0
        while not self.stop.is_set():
            i += 1
            if self.delay:
                time.sleep(self.delay)
            yield delta.replace('"w0 "', f'"w{i} "')
        yield from tail


def cell_while_streaming(kernel: KernelSession, n: int, delay: float) -> tuple[float, float, float]:
    """Median round trip of a trivial cell idle and while a background run streams a long answer (a delta every
    ``delay`` seconds, 0: at full rate); the deltas per second the run took meanwhile."""
    idle = round_trips(kernel, n)
    endless = Endless(delay)
    with ScriptedServer(Reply(events=endless)) as server:  # type: ignore[arg-type]
        kernel.ok(f"%%agent --background --base-url {server.url} -m m --tools noop\ngo")
        while not kernel.value("_runs.runs[-1].run.panel.timeline.entries != []"):
            kernel.pump(0.05)
        taken = kernel.value("len(_runs.runs[-1].run.loop.streaming.pieces)")
        began = time.monotonic()
        busy = round_trips(kernel, n)
        rate = (kernel.value("len(_runs.runs[-1].run.loop.streaming.pieces)") - taken) / (time.monotonic() - began)
        assert kernel.value("_runs.runs[-1].running"), "the stream ended before the cells were measured"
        endless.stop.set()
        kernel.ok("%agent_wait")
    return statistics.median(idle), statistics.median(busy), rate


def cpu_per_round(kernel: KernelSession, n: int, background: bool) -> float:
    """Kernel CPU ms per round of an ``n``-call run, in the foreground or in the background (its cell, then the
    ``%agent_wait`` cell that ends with it)."""
    kernel.ok(f"model = script({n})")
    if background:
        kernel.ok("%%agent --background -m model --tools noop\ngo")
        start = len(kernel.value("_times")) - 2
        kernel.ok("%agent_wait")
    else:
        kernel.ok("%%agent -m model --tools noop\ngo")
        start = len(kernel.value("_times")) - 2
    assert kernel.value("_agent.tool_calls") == n
    (_, cpu0), (_, cpu1) = kernel.value(f"[_times[{start}], _times[-1]]")
    return (cpu1 - cpu0) / n * 1e3


def main() -> None:
    quick = "--quick" in sys.argv
    with agent_kernel(Path(tempfile.mkdtemp(prefix="agentkernel-bench-"))) as kernel:
        kernel.ok(STAMPED)
        kernel.ok(ROUNDS)
        kernel.ok("%config AgentMagics.transcripts = False\nos.environ['OPENAI_API_KEY'] = 'sk-bench'")

        for delay in (0.0, 0.002):
            idle, busy, rate = cell_while_streaming(kernel, 20 if quick else 60, delay)
            how = "at full rate" if not delay else f"a delta every {delay * 1e3:g} ms"
            print(f"1. a trivial cell's round trip: {idle * 1e3:.1f} ms idle, {busy * 1e3:.1f} ms while a background "
                  f"run streams {how} (it took {rate:,.0f} deltas/s): {busy / idle:.2f}x (goal <= 1.5x)")

        n = 300
        cpu_per_round(kernel, 20, True)  # warm up
        cpu_per_round(kernel, 20, False)
        fore = back = float("inf")
        for _ in range(1 if quick else 3):  # interleaved, best of each
            back = min(back, cpu_per_round(kernel, n, True))
            fore = min(fore, cpu_per_round(kernel, n, False))
        print(f"2. kernel CPU per round ({n} calls): {back:.3f} ms in the background, {fore:.3f} ms in the foreground: "
              f"{back / fore:.2f}x (goal <= 1.2x)")
        print("3. the model's stream during a 10 s blocking cell: the share of the deltas the server sent meanwhile "
              "that the kernel read meanwhile")
        rows = []
        for _ in range(1 if quick else 2):
            for off_loop in (False, True):
                share, after, sent = blocking_cell(kernel, off_loop)
                rows.append((off_loop, share, after, sent))
        for where in (False, True):
            found = [r for r in rows if r[0] is where]
            print(f"   read on {'the model I/O thread' if where else 'the kernel loop   '}: "
                  f"{statistics.median(r[1] for r in found):.2f} of {found[0][3]} deltas")


if __name__ == "__main__":
    main()
