"""What servers say when a request is too long for the model's context window: the error dialects the adapters
recognise as a :class:`~agentkernel.models.base.ContextOverflowError`."""

from __future__ import annotations

import re
from typing import Any

_MAXIMUM = re.compile(r"maximum context length is (\d[\d,]*) tokens", re.IGNORECASE)
_REQUESTED = re.compile(r"(?:you requested|resulted in|request \()\s*(\d[\d,]*) tokens", re.IGNORECASE)
_AVAILABLE = re.compile(r"available context size \((\d[\d,]*) tokens\)", re.IGNORECASE)
_IN_MESSAGES = re.compile(r"\((\d[\d,]*) in the messages", re.IGNORECASE)
_AT_LEAST = re.compile(r"prompt contains at least (\d[\d,]*) input tokens", re.IGNORECASE)
_TOO_LONG = re.compile(r"prompt is too long: (\d[\d,]*) tokens > (\d[\d,]*) maximum", re.IGNORECASE)
_EXCEED_LIMIT = re.compile(r"input length and `?max_tokens`? exceed context limit: (\d[\d,]*) \+ \d[\d,]* > "
                           r"(\d[\d,]*)", re.IGNORECASE)
OVERFLOW_CODES = ("context_length_exceeded", "exceed_context_size_error")


def overflow_numbers(body: Any, message: str) -> tuple[bool, int | None, int | None]:
    """Read an error body / message: is it a context overflow, and the window and prompt size it names.

    Knows OpenAI's ``context_length_exceeded`` (also mid-stream), llama.cpp's ``exceed_context_size_error``
    (``n_ctx``, ``n_prompt_tokens``), vLLM's "This model's maximum context length is N tokens" and Anthropic's
    "prompt is too long: N tokens > M maximum" and "input length and `max_tokens` exceed context limit: N + K > M".
    """
    fields: dict[str, Any] = body if isinstance(body, dict) else {}
    if isinstance(fields.get("error"), dict):
        fields = fields["error"]
    text = " ".join(str(x) for x in (fields.get("message"), message) if x)
    codes = {str(fields.get("code")), str(fields.get("type"))}
    anthropic = _TOO_LONG.search(text) or _EXCEED_LIMIT.search(text)
    window = (_number(fields.get("n_ctx")) or _match(_MAXIMUM, text) or _match(_AVAILABLE, text)
              or (_match(anthropic.re, text, 2) if anthropic else None))
    prompt = (_number(fields.get("n_prompt_tokens")) or _match(_IN_MESSAGES, text) or _match(_AT_LEAST, text)
              or _match(_REQUESTED, text) or (_match(anthropic.re, text) if anthropic else None))
    is_overflow = bool(codes & set(OVERFLOW_CODES)) or _MAXIMUM.search(text) is not None or (
        "exceeds the available context size" in text) or anthropic is not None
    return is_overflow, window, prompt


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _match(pattern: re.Pattern[str], text: str, group: int = 1) -> int | None:
    found = pattern.search(text)
    return int(found.group(group).replace(",", "")) if found else None
