"""What the undo journal costs a ``run_python`` call (agentkernel/journal.py).

Not a test: run ``PYTHONPATH=. python benchmarks/undo.py``. In an in-process IPython shell (no kernel) whose
namespace holds 10,000 names, it times ``run_python`` calls (the kernel tool, as a run calls it) with the journal
and without it (the journal's wrapping replaced by nothing): for code that touches one small object (the goal is at
most 1.1x), as a later call of the run (the object was copied by the first) and as the first call of a run (it is
copied), code that only binds a name, and code that calls a notebook function (whose code is read to see what it
uses). On a shared, loaded machine: the CPU time of each call (steadier than wall time, which also counts the time
other processes hold the cores), the two alternating call by call, and the ratio taken per round of 40 calls each
(of the rounds' medians) and reported as the median over 41 rounds, with the same ratio in wall time beside it.
Then the copy cost per MB touched: code that changes one element of an array or a DataFrame of 8 and 64 MB in place,
with the journal against without, divided by the size (the copy, and the fingerprints before and after).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from IPython.core.interactiveshell import InteractiveShell

from agentkernel.jupyter.kernel.tools import KernelTools
from agentkernel.tools import ToolContext

NAMES = 10_000


def namespace(shell: InteractiveShell) -> None:
    ns = shell.user_ns
    for i in range(NAMES):
        kind = i % 10
        ns[f"v{i}"] = [i, i + 1] if kind == 0 else {"k": i} if kind == 1 else f"text {i}" if kind == 2 else i
    ns["small"] = [1, 2, 3]
    ns["np"], ns["pd"] = np, pd
    shell.run_cell("def helper(x):\n    small[1] += x\n    return small[1]", store_history=False)


@contextlib.contextmanager
def nothing(code: str, run_id: str, changed: list[Any]) -> Iterator[None]:
    yield


async def timed(tools: KernelTools, code: str, journal: bool, run_id: str) -> tuple[float, float]:
    """One call's CPU time (all the process's threads: the code runs in a worker) and wall time."""
    ctx = ToolContext("call", "run_python", run_id=run_id)
    if not journal:
        tools.journaled = nothing  # type: ignore[assignment,method-assign]
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        await tools.run_python(code, ctx)
        return time.process_time() - cpu, time.perf_counter() - wall
    finally:
        if not journal:
            del tools.journaled


async def compare(tools: KernelTools, code: str, rounds: int = 41, repeats: int = 40,
                  fresh: bool = False) -> tuple[float, float, float, float]:
    """``code`` with and without the journal: the median CPU times of each, the median over rounds of the ratio of a
    round's median CPU times, and the same ratio of wall times. In a round the two alternate call by call (which
    goes first alternating too), so that a burst of load weighs on both. ``fresh``: each call is the first of its
    run (its objects are copied); else a round's calls are one run (copied by its first call)."""
    cpu: dict[bool, list[float]] = {True: [], False: []}
    ratios, wall_ratios = [], []
    for r in range(rounds):
        times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for i in range(repeats):
            for journal in ((True, False) if (r + i) % 2 else (False, True)):
                times[journal].append(await timed(tools, code, journal, f"bench{r}.{i}" if fresh else f"bench{r}"))
        with_cpu, with_wall, base_cpu, base_wall = ([t[k] for t in times[journal]]
                                                     for journal in (True, False) for k in (0, 1))
        ratios.append(statistics.median(with_cpu) / statistics.median(base_cpu))
        wall_ratios.append(statistics.median(with_wall) / statistics.median(base_wall))
        cpu[True] += with_cpu
        cpu[False] += base_cpu
        tools.journals.forget()  # the copies of the last round are not kept for ever
    return (statistics.median(cpu[True]), statistics.median(cpu[False]), statistics.median(ratios),
            statistics.median(wall_ratios))


async def main() -> None:
    shell = InteractiveShell.instance()
    namespace(shell)
    tools = KernelTools(shell)
    print(f"run_python in a namespace of {NAMES:,} names")
    print("CPU time per call, medians; ratio: the median over rounds of with / without (wall: the same in wall time)")
    print(f"{'code':<44}{'journal':>12}{'none':>12}{'ratio':>9}{'wall':>9}")
    for label, code, fresh in [("small[0] += 1  (one small list, in place)", "small[0] += 1", False),
                               ("  the same, first call of each run", "small[0] += 1", True),
                               ("x = 1", "x = 1", False),
                               ("helper(2)  (a notebook function)", "helper(2)", False)]:
        ours, base, ratio, wall = await compare(tools, code, fresh=fresh)
        print(f"{label:<44}{ours * 1e3:>9.3f} ms{base * 1e3:>9.3f} ms{ratio:>8.2f}x{wall:>8.2f}x")
    print("\ncopy cost per MB touched (one element changed in place)")
    for megabytes in (8, 64):
        rows = megabytes * 2**20 // 8
        shell.user_ns["arr"] = np.zeros(rows)
        shell.user_ns["frame"] = pd.DataFrame({"a": np.zeros(rows // 2), "b": np.zeros(rows // 2)})
        for label, code in [(f"array, {megabytes} MB", "arr[0] += 1"), (f"DataFrame, {megabytes} MB",
                                                                         "frame.iloc[0, 0] += 1")]:
            ours, base, _, _ = await compare(tools, code, rounds=3, repeats=3)
            per = (ours - base) / megabytes
            print(f"{label:<44}{ours * 1e3:>9.1f} ms{base * 1e3:>9.1f} ms{per * 1e3:>8.2f} ms/MB")


if __name__ == "__main__":
    asyncio.run(main())
