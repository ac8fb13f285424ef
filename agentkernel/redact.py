"""Keeping API keys out of everything a run shows or saves: error messages, cassettes, transcripts and displays."""

from __future__ import annotations

import os
import re
from typing import Any

from .text import map_strings

MARKER = "[redacted]"
MIN_SECRET_CHARS = 8
"""Shorter strings are not treated as keys (replacing them everywhere would mangle ordinary text)."""

_KEY_LIKE = re.compile(r"\b(?:sk|sess)-[A-Za-z0-9_\-*.]{6,}")
_URL_USERINFO = re.compile(r"(https?://)[^/@\s]+@")


def known_secrets(*keys: str | None) -> list[str]:
    """The keys to hide: those given (a model's own key, say) and ``OPENAI_API_KEY``."""
    candidates = [*keys, os.environ.get("OPENAI_API_KEY")]
    return [k for k in dict.fromkeys(candidates) if isinstance(k, str) and len(k) >= MIN_SECRET_CHARS]


def redact_text(text: str, secrets: list[str]) -> str:
    """``text`` with each secret, anything shaped like an OpenAI key, and credentials in URLs replaced."""
    for secret in secrets:
        text = text.replace(secret, MARKER)
    return _URL_USERINFO.sub(r"\1", _KEY_LIKE.sub(MARKER, text))


def redact(value: Any, secrets: list[str]) -> Any:
    """:func:`redact_text` applied to every string inside a JSON-like value (dicts, lists)."""
    return map_strings(value, lambda text: redact_text(text, secrets))


def redact_bundle(data: dict[str, Any], secrets: list[str]) -> dict[str, Any]:
    """A display's MIME bundle with every text part redacted (text/plain, text/html, text/markdown, JSON, SVG, ...);
    base64 data (``image/png`` and the other raster images, PDF) is left as it is: it is not text, and a key found
    in it by chance would be a coincidence that redacting would turn into a broken image."""
    return {mime: value if _is_binary(mime) else redact(value, secrets) for mime, value in data.items()}


def _is_binary(mime: str) -> bool:
    return (mime.startswith("image/") and mime != "image/svg+xml") or mime == "application/pdf"


def without_credentials(url: str) -> str:
    """A URL safe to show: any ``user:password@`` part removed."""
    return _URL_USERINFO.sub(r"\1", url)
