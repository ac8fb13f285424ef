"""What ``%load_ext agentkernel`` costs, beside what ``import IPython, ipywidgets`` costs, in one process.

Not a test: run ``python benchmarks/startup.py``. Each sample is a fresh interpreter that (1) imports IPython and
ipywidgets and makes an IPython shell, timed; (2) runs ``%load_ext agentkernel``, timed; (3) runs a first
``%%agent`` cell with a scripted model (the awaited form the input transformer makes of it) and says whether
``openai``, ``anthropic``, ``mcp``, ``genai_prices`` or ``opentelemetry`` (tracing is off) were imported by any of
it. Two kinds of sample: a bare interpreter, and one that has first imported what every Jupyter kernel has loaded
before a cell runs (``ipykernel.kernelapp``: asyncio, tornado, zmq), which is where ``%load_ext`` really runs. The
figures are the median of seven samples of each, in CPU time (so a busy machine does not blur them); the goal is a
``%load_ext`` that costs at most 0.1 s more than the baseline's own import, and no SDK loaded by a scripted run.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

SAMPLE = r"""
import json, sys, time
if sys.argv[1] == "kernel":
    import ipykernel.kernelapp
t0 = time.process_time()
import IPython, ipywidgets
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
t1 = time.process_time()
shell.run_line_magic("load_ext", "agentkernel")
t2 = time.process_time()
loaded = {name: name in sys.modules for name in ("openai", "anthropic", "mcp", "genai_prices", "opentelemetry")}
shell.run_cell("import agentkernel\nm = agentkernel.ScriptedModel(['hello'])")
shell.run_cell("%%agent -m m\nsay hello", store_history=False)
t3 = time.process_time()
ran = {name: name in sys.modules for name in loaded}
print(json.dumps({"baseline": t1 - t0, "load_ext": t2 - t1, "first_run": t3 - t2, "loaded": loaded, "ran": ran,
                  "status": shell.user_ns["_agent"].status}))
"""


def sample(kind: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SAMPLE, kind], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(kind: str, samples: list[dict]) -> None:
    print(f"-- {kind}")
    baseline = statistics.median(s["baseline"] for s in samples)
    load_ext = statistics.median(s["load_ext"] for s in samples)
    first_run = statistics.median(s["first_run"] for s in samples)
    print(f"import IPython, ipywidgets (+ a shell): {baseline:.3f} s")
    print(f"%load_ext agentkernel:                  {load_ext:.3f} s  ({load_ext / baseline:.2f} x the baseline; "
          f"goal: at most 0.1 s)")
    print(f"first %%agent run, scripted model:      {first_run:.3f} s  (status {samples[0]['status']})")
    for when, key in (("after %load_ext", "loaded"), ("after the first run", "ran")):
        imported = sorted({name for s in samples for name, yes in s[key].items() if yes})
        print(f"SDKs imported {when}: {', '.join(imported) or 'none'}")


def main() -> None:
    samples: dict[str, list[dict]] = {"bare interpreter": [], "kernel": []}
    for _ in range(7):  # interleaved, so both kinds see the same machine
        for kind, found in samples.items():
            found.append(sample("kernel" if kind == "kernel" else "bare"))
    for kind, found in samples.items():
        report(kind, found)


if __name__ == "__main__":
    main()
