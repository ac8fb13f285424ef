"""What redacting a tool output costs, per KB, with 0, 10 and 100 secrets in the set (issue 23).

Not a test: run ``PYTHONPATH=. python benchmarks/redaction.py`` (``--help`` for the settings). Each secret is a
random 32-character token; the set redacts each in about a dozen forms (as written, URL-encoded, escaped, base64 at
three alignments), so 100 secrets are over a thousand strings to look for. The output is ``--kb`` KB of log-like
text holding no secret (the usual case) and the same text with one secret in it. Each figure is the best of
``--repeat`` timings (CPU time) of ``--number`` calls, the sets timed in turn so that a busy machine slows them
alike; the ratios are to the empty set, which still removes key-shaped strings and URL credentials. The first secret
adds a fixed cost per KB (the text's 4-byte words are looked up in the secrets' index); more secrets add nothing to
it. Goal: 100 secrets cost at most 1.2x what 10 cost. A third text holds a 20-character piece of a secret (any
16 characters of one are replaced, issue 27). Last, what keeping the kernel's set current costs each tool call: a
look at whether the environment changed.
"""

from __future__ import annotations

import argparse
import secrets
import time
import timeit

from agentkernel.secrets import KERNEL, SecretSet


def log_text(kb: int) -> str:
    """``kb`` KB of text that looks like a tool's output: log lines with numbers, words and paths."""
    lines, size, i = [], 0, 0
    while size < kb * 1024:
        line = f"2026-12-01 16:{i % 60:02d} worker={i % 7} GET /api/items/{i * 37 % 1000} status=200 took={i % 90}ms"
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines)[: kb * 1024]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=int, default=4, help="size of the output, in KB")
    parser.add_argument("--number", type=int, default=500, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=15, help="timings per set (the best counts)")
    args = parser.parse_args()
    counts = (0, 10, 100)
    sets = {n: SecretSet(tuple((f"SECRET_{i}", secrets.token_urlsafe(24)) for i in range(n)), 1) for n in counts}
    clean = log_text(args.kb)
    with_one = clean[: len(clean) // 2] + sets[100].secrets[0][1] + clean[len(clean) // 2:]
    with_piece = clean[: len(clean) // 2] + sets[100].secrets[0][1][2:22] + clean[len(clean) // 2:]
    for s in sets.values():  # compile the indexes before timing
        s.redact("x")
    for label, text in (("no secret in the text", clean), ("one secret in the text", with_one),
                        ("a piece of one in the text", with_piece)):
        best = {n: float("inf") for n in counts}
        for _ in range(args.repeat):
            for n in counts:
                seconds = timeit.timeit(lambda n=n, text=text: sets[n].redact(text), number=args.number,
                                        timer=time.process_time)
                best[n] = min(best[n], seconds / args.number / args.kb * 1e6)
        figures = ", ".join(f"{n} secrets {best[n]:.1f} µs/KB ({best[n] / best[0]:.2f}x)" for n in counts)
        print(f"{label}: {figures}; 100 secrets / 10 secrets: {best[100] / best[10]:.2f}x")
    KERNEL.current  # noqa: B018 - computed once, as the run's start does
    look = min(timeit.repeat(lambda: KERNEL.current, number=args.number * 20, repeat=args.repeat,
                             timer=time.process_time)) / (args.number * 20) * 1e6
    print(f"keeping the kernel's set current: {look:.2f} µs per tool call (the environment compared, unchanged)")


if __name__ == "__main__":
    main()
