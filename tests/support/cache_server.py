"""A loopback OpenAI-compatible server with a prompt cache that works the way OpenAI documents it.

OpenAI caches prompts of 1024 tokens or more; a request is served from the cache for the longest prefix it shares
with an earlier request, counted in steps of 128 tokens after the first 1024, and ``usage`` says how many
(Responses ``input_tokens_details.cached_tokens``, Chat ``prompt_tokens_details.cached_tokens``). The prefix is the
tools, then the system prompt (``instructions``), then the messages in order, so a request that only appends to the
one before reads nearly all of it from the cache, and one whose history changed early (a compaction) reads only up
to the change.

:class:`CachingServer` is :class:`~openai_server.WindowServer` with such a cache (``cache=False``: the same server
without one, to compare against) that also honours the request's output cap: an answer longer than
``max_output_tokens`` / ``max_completion_tokens`` / ``max_tokens`` is cut there and ends as the API ends a response
cut at its cap (Responses ``incomplete`` with ``max_output_tokens``, Chat ``finish_reason`` ``length``).

:class:`AnthropicCachingServer` does the same for the Messages API the way Anthropic documents its cache: a request
writes the prefix up to each of its ``cache_control`` breakpoints (from 1024 tokens on) and reads the longest prefix
an earlier request wrote; ``usage`` reports ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` apart
from ``input_tokens`` (the tokens after them).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from anthropic_server import messages_events
from openai_server import Answer, Received, Reply, ScriptedServer, WindowServer, _requested_output

CHARS_PER_TOKEN = 3
"""The server's tokenizer: 3 characters of the prompt a token (the client estimates 4, so it undercounts)."""


def prompt_text(body: dict[str, Any]) -> str:
    """A request's prompt in the order the cache reads it: tools, system prompt, then the history."""
    messages = body.get("messages")
    history = messages if messages is not None else body.get("input") or []
    if isinstance(history, str):
        history = [{"role": "user", "content": history}]
    parts = [json.dumps(body.get("tools") or [], sort_keys=True), str(body.get("instructions") or "")]
    parts += [json.dumps(item, sort_keys=True, ensure_ascii=False) for item in history]
    return "\n".join(parts)


def prompt_tokens(body: dict[str, Any]) -> int:
    return math.ceil(len(prompt_text(body)) / CHARS_PER_TOKEN)


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of two strings (a binary search of C-speed comparisons)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass
class PromptCache:
    """OpenAI's rule: no hit under ``minimum`` tokens, then hits in steps of ``block`` tokens."""

    minimum: int = 1024
    block: int = 128
    keep: int = 16
    """How many recent prompts stay cached (a run only ever extends its newest one)."""
    prompts: list[str] = field(default_factory=list)

    def lookup(self, text: str) -> int:
        """The tokens of ``text`` served from the cache; ``text`` is cached for the requests after it."""
        longest = max((common_prefix(text, earlier) for earlier in self.prompts), default=0)
        self.prompts = [*self.prompts[-(self.keep - 1):], text]
        return self.cached(longest // CHARS_PER_TOKEN)

    def cached(self, shared: int) -> int:
        if shared < self.minimum:
            return 0
        return self.minimum + (shared - self.minimum) // self.block * self.block


class CachingServer(WindowServer):
    """:class:`~openai_server.WindowServer` (``reply(body, prompt_tokens)`` answers; a ``window`` refuses what
    does not fit) with a :class:`PromptCache` and output caps honoured; :attr:`cached` keeps each answered
    request's cached tokens."""

    def __init__(self, reply: Any, *, window: int = 10**9, cache: bool = True, **options: Any):
        super().__init__(window, reply=reply, count=prompt_tokens, **options)
        self.cache = PromptCache() if cache else None
        self.cached: list[int] = []

    def answer_reply(self, chat: bool, body: dict[str, Any], prompt_tokens: int, answer: Answer,
                     cached: int = 0, cut: bool = False) -> Reply:
        cached = self.cache.lookup(prompt_text(body)) if self.cache is not None else 0
        self.cached.append(cached)
        cap = _requested_output(body)
        if cap and answer.tokens() > cap:  # cut at the cap: the text that fits, no call
            text = "".join(answer.text)[:cap * CHARS_PER_TOKEN]
            answer, cut = Answer([text] if text else [], (), output_tokens=cap), True
        return super().answer_reply(chat, body, prompt_tokens, answer, cached, cut)


def anthropic_prompt(body: dict[str, Any]) -> tuple[str, list[int]]:
    """A Messages request's prompt in cache order (tools, system, messages, block by block, ``cache_control`` left
    out) and the offsets where its breakpoints end."""
    parts: list[tuple[dict[str, Any], bool]] = []
    system = body.get("system") or []
    for block in [*(body.get("tools") or []), *([{"text": system}] if isinstance(system, str) else system)]:
        parts.append((block, "cache_control" in block))
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        parts += [({"role": message.get("role"), **block}, "cache_control" in block) for block in blocks]
    text, breakpoints = "", []
    for block, marked in parts:
        text += json.dumps({k: v for k, v in block.items() if k != "cache_control"}, sort_keys=True) + "\n"
        if marked:
            breakpoints.append(len(text))
    return text, breakpoints


class AnthropicCachingServer(ScriptedServer):
    """A loopback Messages API (``POST /v1/messages``) with Anthropic's prompt cache (``cache=False``: none); each
    request is answered with ``reply(body, prompt_tokens)`` (an :class:`~openai_server.Answer`) and kept in
    :attr:`measured` as (prompt tokens, read, written)."""

    minimum = 1024

    def __init__(self, reply: Any, *, cache: bool = True, **options: Any):
        super().__init__()
        self.reply = reply
        self.cache = cache
        self.written: list[str] = []
        self.measured: list[tuple[int, int, int]] = []

    def next_reply(self, received: Received) -> Reply:
        body = received.body
        text, breakpoints = anthropic_prompt(body)
        total = math.ceil(len(text) / CHARS_PER_TOKEN)
        read = written = 0
        if self.cache:
            hit = max((len(p) for p in self.written if text.startswith(p)), default=0)
            read = hit // CHARS_PER_TOKEN
            ends = [end for end in breakpoints if end // CHARS_PER_TOKEN >= self.minimum]
            if ends and max(ends) > hit:
                written = (max(ends) - hit) // CHARS_PER_TOKEN
            self.written = [*self.written[-15:], *(text[:end] for end in ends)]
        with self._lock:
            self.requests.append(received)
            self.measured.append((total, read, written))
        answer = self.reply(body, total)
        calls = [(call_id, name, [arguments]) for call_id, name, arguments in answer.calls]
        return Reply(messages_events(list(answer.text), calls, usage=(total - read - written, answer.tokens()),
                                     cache=(read, written)))
