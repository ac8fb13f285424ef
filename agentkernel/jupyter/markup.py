"""What a model or a tool wrote, as a notebook shows it: Markdown rendered to HTML that runs nothing and fetches
nothing.

JupyterLab and Notebook 7 render the ``text/html`` (and the HTML inside ``text/markdown``) of the current session's
outputs with scripts and event handlers live, and again when the user reopens their own saved notebook; so is
``nbconvert --to html``. A model steered by a prompt injection must not reach that: :func:`markdown_html` is the one
road from untrusted Markdown to what a view shows (the live panel's messages, the record). It renders CommonMark
with raw HTML off (typed tags are shown as text), tables and strikethrough on; a link keeps its URL only if the
URL is ``http``, ``https``, ``mailto`` or relative (anything else is shown as the text typed); an image becomes a
link reading ``image: <alt>`` that the user may click, never loaded by itself. Plain text goes through
:func:`html.escape`. Our own figures (images a tool returned, shown inline as ``data:`` URIs we make) take another
road (:func:`agentkernel.jupyter.render.image_html`), so no model text can become an image.

The math in a message is shown as typed (``mathjax_ignore`` and ``tex2jax_ignore`` on the block): the front ends
typeset TeX in HTML outputs and HTML widgets with MathJax, whose commands (``\\href``, ``\\require``,
``\\unicode``) make links and load code and fonts by their own rules, which are not ours to vouch for. (Measured
2026-12-03: JupyterLab 4.6's MathJax made no link of ``\\href{javascript:...}``, and nbconvert's page loads
MathJax 2 with its ``Safe`` extension; the block is left out of typesetting all the same.)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.token import Token

SCHEMES = frozenset({"http", "https", "mailto"})
"""The URL schemes a link in model text may have (and relative URLs, which have none)."""
NO_MATH = "tex2jax_ignore mathjax_ignore"
"""A class that makes MathJax (2, 3 and 4: the front ends typeset TeX in HTML outputs and HTML widgets) leave an
element's text as typed; every view that holds text a model or a tool wrote is inside one."""
BLOCK_CLASS = f"agentkernel-text {NO_MATH}"
"""The class of the ``<div>`` :func:`markdown_html` returns."""
# What a browser's URL parser drops before it reads the scheme (leading C0 and space; tab and newline anywhere).
_DROPPED = {c: None for c in range(0x21)} | {0x7F: None}


def markdown_html(text: str) -> str:
    """``text``, Markdown a model or a tool wrote, as one ``<div>`` of HTML in which nothing runs and nothing is
    fetched: raw HTML shown as typed, links only to :data:`SCHEMES` or relative URLs (and with ``rel="noopener
    noreferrer nofollow"``), images as links to click, math as typed."""
    return f'<div class="{BLOCK_CLASS}">{_renderer().render(text)}</div>'


def safe_url(url: str) -> bool:
    """Whether a link may point at ``url``: a relative URL, or one whose scheme is in :data:`SCHEMES`, read as a
    browser reads it (whitespace and control characters dropped, any case)."""
    cleaned = url.translate(_DROPPED)
    scheme, colon, _ = cleaned.partition(":")
    if not colon or any(c in scheme for c in "/?#"):  # no scheme: relative (a colon after the path starts)
        return True
    return scheme.lower() in SCHEMES


@functools.cache
def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
    md.validateLink = safe_url  # type: ignore[method-assign]
    md.add_render_rule("image", _image)
    md.add_render_rule("link_open", _link_open)
    return md


def _link_open(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    return str(self.renderToken(tokens, idx, options, env))


def _image(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    """An image as a link reading ``image: <alt>`` (the URL is never loaded unless the user clicks it)."""
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    label = escapeHtml(f"image: {alt}" if alt else "image")
    src = str(token.attrGet("src") or "")
    if not src or not safe_url(src):
        return label
    return f'<a href="{escapeHtml(src)}" rel="noopener noreferrer nofollow">{label}</a>'
