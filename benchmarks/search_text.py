"""What running ``search_text``'s matching in a child process costs, against matching in this process.

Not a test: run ``python benchmarks/search_text.py``. The child process is what keeps a slow pattern from
freezing the event loop (``re`` holds the GIL for a whole match); this prints its price per search for one small
file and for this repository's ``agentkernel`` and ``tests`` folders, and the ratio to the same matching done
in-process (``text_files.scan``, the very code the child runs), median of several runs each, and the child's
own CPU time (which, unlike the wall clock, does not grow when the machine is busy).
"""

from __future__ import annotations

import resource
import statistics
import time
from pathlib import Path

from agentkernel.tools.file_reading import scan
from agentkernel.tools.file_search import search_files
from agentkernel.tools.files import MAX_FILE_BYTES, MAX_MATCH_LINE_CHARS, MAX_MATCHES, PathPolicy

REPO = Path(__file__).resolve().parent.parent
RUNS = 7


def files_under(folder: str) -> list[str]:
    policy = PathPolicy(REPO)
    return [str(f) for f in policy._walk(policy._locate(folder))]


def median_seconds(work: object, runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def child_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    pattern = r"def \w+\("
    cases = {"one file": [str(REPO / "agentkernel" / "loop.py")], "agentkernel/": files_under("agentkernel"),
             "tests/": files_under("tests")}
    print(f"search for {pattern!r}, median of {RUNS} runs")
    print(f"{'files':>14} {'n':>4} {'in-process ms':>14} {'child ms':>9} {'ratio':>6} {'child CPU ms':>13}")
    for name, files in cases.items():
        job = {"pattern": pattern, "files": files, "max_bytes": MAX_FILE_BYTES, "max_matches": MAX_MATCHES + 1,
               "line_chars": 4 * MAX_MATCH_LINE_CHARS}
        inside = median_seconds(lambda job=job: list(scan(job)))
        cpu = child_cpu_seconds()
        child = median_seconds(lambda files=files: search_files(
            pattern, files, seconds=30, max_bytes=MAX_FILE_BYTES, max_matches=MAX_MATCHES + 1,
            line_chars=4 * MAX_MATCH_LINE_CHARS))
        cpu = (child_cpu_seconds() - cpu) / RUNS
        print(f"{name:>14} {len(files):>4} {inside * 1000:>14.1f} {child * 1000:>9.1f} {child / inside:>6.1f} "
              f"{cpu * 1000:>13.1f}")


if __name__ == "__main__":
    main()
