"""What the text-loop guard saves on a real model that repeats itself, and what it costs per character.

Not a test: run ``PYTHONPATH=. python benchmarks/text_loop.py`` (``--cost`` for the second part only, which needs
no server). First, llama.cpp's server with SmolLM2-135M-Instruct (``scripts/llama_server.py``: greedy, one
thread) answers a prompt that makes it repeat one line of a poem until its output cap; the same run with the guard
off (``text_repeats=0``) and on (the default), ``--max-output-tokens 1024``, through the Chat Completions adapter:
status, characters of text kept, seconds. Then the guard alone, fed text that never repeats in deltas of 1 and of
20 characters, 10 KB and 1 MB of it: microseconds per character (flat when the cost does not grow with the
response), best of three.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import llama_server  # noqa: E402

from agentkernel import GuardConfig, Limits, run  # noqa: E402
from agentkernel.guards import TextLoopGuard  # noqa: E402
from agentkernel.models import OpenAIChatModel  # noqa: E402

PROMPT = "Write a poem about the sea."
"""SmolLM2-135M-Instruct, greedy, writes a few lines of it, then repeats one ("A place ...") until its cap."""
SYSTEM = "You are a helpful assistant."
CAP = 1024


def saved() -> None:
    with tempfile.TemporaryDirectory() as folder, llama_server.start(Path(folder) / "server.log") as server:
        model = OpenAIChatModel(llama_server.MODEL_NAME, base_url=server.api_url, max_output_tokens=CAP)
        print(f"{PROMPT!r}, SmolLM2-135M-Instruct on llama.cpp (greedy, one thread), --max-output-tokens {CAP}")
        times = {}
        for name, repeats in (("off", 0), ("on", 10)):
            start = time.perf_counter()
            result = asyncio.run(run(PROMPT, model=model, system=SYSTEM, guards=GuardConfig(text_repeats=repeats),
                                     limits=Limits(max_seconds=600)))
            times[name] = time.perf_counter() - start
            print(f"  guard {name:3}: {result.status:11} {len(result.answer or ''):5} characters "
                  f"{times[name]:6.1f} s")
        print(f"  saved {times['off'] - times['on']:.1f} s ({times['off'] / times['on']:.1f}x faster)")


def cost() -> None:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(5000)]
    text = " ".join(rng.choices(words, k=220_000))[:1_000_000]
    print("the guard alone, text that never repeats, best of 3")
    print(f"{'characters':>11} {'delta':>6} {'µs/char':>8}")
    for size in (10_000, 1_000_000):
        for step in (1, 20):
            deltas = [text[i:i + step] for i in range(0, size, step)]
            best = float("inf")
            for _ in range(3):
                guard = TextLoopGuard(10)
                start = time.perf_counter()
                for delta in deltas:
                    assert guard.feed(delta) is None
                best = min(best, time.perf_counter() - start)
            print(f"{size:>11,} {step:>6} {best / size * 1e6:>8.2f}")


if __name__ == "__main__":
    if "--cost" not in sys.argv:
        saved()
    cost()
