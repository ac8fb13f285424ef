"""The invariant the secret tests check on every road out: no run of :data:`PIECE` or more consecutive characters of
a secret's value is there, whatever a tool cut, squeezed, wrapped, escaped or highlighted.

Independent of :mod:`agentkernel.secrets` on purpose (a plain search, not its index): a run of 16 characters of a
value holds one of the value's 8-character blocks that start at a multiple of 8, so each block is looked for and
every place one is found is grown both ways.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

PIECE = 16
_TAG = re.compile(r"<[^>]*>")


def leaked(value: str, text: str) -> str | None:
    """The first run of :data:`PIECE` or more characters of ``value`` that ``text`` holds (all of a shorter value),
    or None."""
    if len(value) < PIECE:
        return value if value in text else None
    for k in range(0, len(value) - 7, 8):
        block = value[k:k + 8]
        at = text.find(block)
        while at >= 0:
            left = 0
            while left < k and left < at and text[at - left - 1] == value[k - left - 1]:
                left += 1
            right = 8
            while k + right < len(value) and at + right < len(text) and text[at + right] == value[k + right]:
                right += 1
            if left + right >= PIECE:
                return text[at - left:at + right]
            at = text.find(block, at + 1)
    return None


def texts(value: Any) -> Iterator[str]:
    """Every string inside a JSON-like value, and what a reader sees of it: JSON inside a string decoded, HTML
    without its tags (a highlighter splits a string into spans) and its entities decoded."""
    if isinstance(value, str):
        yield value
        if "<" in value or "&" in value:
            yield html.unescape(_TAG.sub("", value))
        if value[:1] in "{[":
            try:
                inner = json.loads(value)
            except ValueError:
                return
            yield from texts(inner)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from texts(key)
            yield from texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from texts(item)


def leaks(secrets: dict[str, str], values: Iterable[Any]) -> dict[str, str]:
    """By secret name, the first piece of its value found in any string of ``values``."""
    found: dict[str, str] = {}
    strings = [text for value in values for text in texts(value)]
    for name, secret in secrets.items():
        for text in strings:
            piece = leaked(secret, text)
            if piece is not None:
                found[name] = piece
                break
    return found
