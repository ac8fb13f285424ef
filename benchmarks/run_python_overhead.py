"""What ``run_python`` adds to running code: a worker thread, output capture and the outputs' text.

Not a test: run ``python benchmarks/run_python_overhead.py``. It runs in an in-process IPython shell (no kernel)
and prints, for a few pieces of code, the best time of the runner against a plain ``exec`` of the same code in the
same namespace (the difference is what the runner adds: thread, transform, compile, capture, text), and the time
Stop takes to end a ``while True: pass`` (from the cancellation to the thread's end).
"""

from __future__ import annotations

import asyncio
import time

from IPython.core.interactiveshell import InteractiveShell

from agentkernel.jupyter.kernel.code_runner import CodeRunner

CASES = {
    "x = 1": "x = 1",
    "print 1,000 lines": "for i in range(1000):\n    print('line', i)",
    "print 100,000 lines (capture capped)": "for i in range(100_000):\n    print('line', i)",
    "sum(range(10**6))": "sum(range(10**6))",
}


async def best_of(runner: CodeRunner, code: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        execution = await runner.run(code)
        execution.text()
        best = min(best, time.perf_counter() - start)
        assert execution.error is None, execution.error
    return best


def plain(shell: InteractiveShell, code: str, repeats: int) -> float:
    compiled = compile(code, "<plain>", "exec")
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        exec(compiled, shell.user_ns)  # prints go to the terminal's stdout: redirected below
        best = min(best, time.perf_counter() - start)
    return best


async def stop_latency(runner: CodeRunner) -> float:
    task = asyncio.ensure_future(runner.run("spinning = True\nwhile True:\n    pass"))
    while not runner.shell.user_ns.get("spinning"):
        await asyncio.sleep(0.01)
    threads_before = [t for t in __import__("threading").enumerate() if t.name == "agentkernel-run-python"]
    start = time.perf_counter()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    for thread in threads_before:
        thread.join(5)
    return time.perf_counter() - start


async def main() -> None:
    import contextlib
    import io

    shell = InteractiveShell.instance()
    runner = CodeRunner(shell)
    print(f"{'code':<40}{'run_python':>14}{'plain exec':>14}{'added':>14}")
    for label, code in CASES.items():
        repeats = 3 if "100,000" in label else 20
        with contextlib.redirect_stdout(io.StringIO()):
            base = plain(shell, code, repeats)
        ours = await best_of(runner, code, repeats)
        print(f"{label:<40}{ours * 1e3:>11.2f} ms{base * 1e3:>11.2f} ms{(ours - base) * 1e3:>11.2f} ms")
    latencies = sorted([await stop_latency(runner) for _ in range(5)])
    print(f"Stop during while True: pass -> the thread ended {latencies[len(latencies) // 2] * 1e6:.0f} µs after the "
          f"cancellation (median of 5)")


if __name__ == "__main__":
    asyncio.run(main())
