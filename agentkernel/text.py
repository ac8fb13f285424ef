"""Small text helpers shared by the loop, the tools and the renderings: one line, cut, call arguments, and text
that is always safe to encode (no lone surrogates) and to write as a JSON line."""

from __future__ import annotations

import functools
import json
import unicodedata
from collections.abc import Callable, Iterable
from json.encoder import c_make_encoder, encode_basestring, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
"""Unicode categories of the characters a reader of an approval cannot see, or that change how the text around them
is shown: controls (``Cc``; tab and newline excepted), format characters (``Cf``: the bidirectional controls
U+202A–202E and U+2066–2069 of the "Trojan Source" trick, zero-width spaces and joiners, the byte-order mark, tag
characters) and the line and paragraph separators (``Zl``, ``Zp``)."""


def short(text: str, width: int = 80) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was in full."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text):,} characters in all)"


def take_lines(lines: Iterable[str], budget: int) -> tuple[list[str], int | None]:
    """As many lines as fit in ``budget`` characters (newlines counted). If even the first line does not fit,
    its first ``budget`` characters, and that line's full length as the second value."""
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > budget:
            if not kept:
                return [line[:budget]], len(line)
            break
        kept.append(line)
        used += len(line) + 1
    return kept, None


def reveal(text: str) -> tuple[str, int]:
    """``text`` with every character of :data:`HIDDEN_CATEGORIES` (but tab and newline) written visibly as
    ``⟨U+202E⟩``, and how many there were (:func:`hidden_warning` says it). Approvals show what will run through
    this, on the terminal and in the panel, before Approve."""
    count = 0

    def shown(char: str) -> str:
        nonlocal count
        if char in "\t\n" or unicodedata.category(char) not in HIDDEN_CATEGORIES:
            return char
        count += 1
        return f"⟨U+{ord(char):04X}⟩"

    if text.isprintable():  # the common case, known at once (no control, format or separator character)
        return text, 0
    visible = "".join([shown(char) for char in text])
    return (visible if count else text), count


def hidden_warning(count: int, what: str = "code") -> str:
    """``"this code holds 3 invisible characters ..."`` for ``count`` characters :func:`reveal` showed (``""`` for
    none); ``what`` names the text."""
    if not count:
        return ""
    return (f"this {what} holds {count} invisible character{'s' * (count != 1)}, shown as ⟨U+…⟩: what runs may "
            "differ from what it seems to say")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate (``"\\ud800"``, which UTF-8 cannot encode) replaced by U+FFFD.

    Such text comes from APIs that send ``"\\ud800"`` escapes, from tools, and from file names that are not
    valid UTF-8; kept as it is, it breaks every later write (a transcript, a display message, a request).
    """
    if not isinstance(text, str):  # a malformed model event (``"delta": 7``): its adapter reports it, not this
        return text
    if text.isascii():  # the common case, known without encoding anything (a str records whether it is ASCII)
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # surrogatepass + utf-16 joins the surrogates that do form pairs
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """``fn`` applied to every string inside a JSON-like value (dict keys and values, list items), as a copy."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {map_strings(k, fn): map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [map_strings(v, fn) for v in value]
    return value


def json_line(record: Any) -> str:
    """``record`` as one line of JSON that can always be written as UTF-8: lone surrogates as ``\\u`` escapes
    (which ``json.loads`` turns back into the same text), values JSON cannot hold as their ``str``."""
    line = json.dumps(record, ensure_ascii=False, default=str)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(record, default=str)
    return line


def load_arguments(arguments: str) -> Any:
    """A call's arguments JSON as a value (``{}`` for empty text); raises ``json.JSONDecodeError``, or
    ``RecursionError`` for JSON nested too deeply to read."""
    if not arguments.strip():
        return {}
    try:
        return _from_json()(arguments)  # pydantic's parser (the one the tools' arguments are validated with)
    except ValueError:  # json's says why; or reads what pydantic's does not (lone surrogates, deeper nesting)
        return json.loads(arguments)


@functools.cache
def _from_json() -> Callable[[str], Any]:
    from pydantic_core import from_json  # imported when the first call comes: five times json.loads' speed

    return from_json


def _encoder(*, sort_keys: bool, ensure_ascii: bool) -> Callable[[Any], str]:
    """``json.JSONEncoder(sort_keys=..., ensure_ascii=...).encode``, made once.

    json.dumps and JSONEncoder.encode build a new C encoder on every call, which costs more than the encoding of a
    small object: this one is built once, without the check for cycles (values parsed from JSON cannot have one; a
    value that does raises RecursionError instead of ValueError).
    """
    fallback = json.JSONEncoder(sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    if c_make_encoder is None:
        return fallback.encode
    encode = c_make_encoder(None, fallback.default, encode_basestring_ascii if ensure_ascii else encode_basestring,
                            None, ": ", ", ", sort_keys, False, True)
    return lambda value: "".join(encode(value, 0))


_normalized = _encoder(sort_keys=True, ensure_ascii=False)
dumps = _encoder(sort_keys=False, ensure_ascii=True)
"""``json.dumps(value)`` (for values without cycles)."""


def read_arguments(arguments: str) -> tuple[str, str | None]:
    """A call's arguments read once: ``(normalized, error)``.

    ``normalized`` is the JSON re-serialized with keys sorted at every depth (not-JSON text is returned stripped);
    ``error`` says in words why the text is not a JSON object (``None`` when it is one).
    """
    text = arguments if isinstance(arguments, str) else str(arguments)
    try:
        value = load_arguments(text)
    except json.JSONDecodeError as e:
        return text.strip(), f"arguments are not valid JSON ({e.msg} at position {e.pos})"
    except RecursionError:
        return text.strip(), "arguments are nested too deeply to read"
    try:
        normalized = _normalized(value)
    except (RecursionError, ValueError):
        normalized = text.strip()
    return normalized, None if isinstance(value, dict) else "arguments must be a JSON object"


def normalize_arguments(arguments: str) -> str:
    """The arguments JSON re-serialized with keys sorted at every depth; not-JSON text is returned stripped."""
    return read_arguments(arguments)[0]


def short_arguments(arguments: str, width: int = 70) -> str:
    """``path="a.txt", limit=20`` from a call's JSON arguments, cut to ``width``."""
    try:
        value = load_arguments(arguments)
        text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in value.items())
    except (ValueError, RecursionError, AttributeError, TypeError):  # not a JSON object (or too deep to read)
        text = arguments
    return short(text, width)


def pretty_arguments(arguments: str) -> str:
    """A call's arguments JSON indented for reading (as given when it is not JSON, or too deep to indent)."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return arguments
