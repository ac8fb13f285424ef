"""What in a piece of HTML would run or fetch by itself in a browser, found with a real HTML parser.

:func:`live_parts` parses HTML with :mod:`html.parser` (which decodes entities in attribute values as a browser
does) and lists every element or attribute outside what :mod:`agentkernel.jupyter.markup` and the record may
make: a tag that runs or loads (``script``, ``iframe``, ``img``, ``svg``, ``style``, ``link``, ...), an event
handler, a ``src``/``srcset``/``poster``/``background`` attribute, a CSS ``url()`` or ``@import`` in a ``style``,
a link whose URL is not ``http``, ``https``, ``mailto`` or relative, read as a browser reads a URL (whitespace and
control characters dropped, any case). ``allow_data_images`` admits our own figures: ``<img src="data:image/...">``
(which loads nothing from elsewhere).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

# The tags the renderer (CommonMark, tables, strikethrough) and the record's own HTML (details, Pygments' spans)
# may make; anything else is a finding.
TAGS = frozenset({
    "div", "p", "span", "em", "strong", "b", "i", "s", "code", "pre", "a", "ul", "ol", "li", "blockquote",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "br", "table", "thead", "tbody", "tr", "th", "td", "details",
    "summary", "small",
})
ATTRIBUTES = frozenset({"href", "rel", "title", "class", "start", "style", "alt", "open"})
SCHEMES = frozenset({"http", "https", "mailto"})
SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
CSS_LOADS = ("url(", "@import", "image(", "image-set(", "expression(", "behavior", "-moz-binding", "\\")


def url_scheme(url: str) -> str | None:
    """The scheme a browser reads in ``url`` (lower case), or None for a relative URL."""
    url = "".join(c for c in url.strip("\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13"
                                       "\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f ") if c not in "\t\n\r")
    found = SCHEME.match(url)
    return found.group(1).lower() if found else None


class _Finder(HTMLParser):
    def __init__(self, allow_data_images: bool):
        super().__init__(convert_charrefs=True)
        self.allow_data_images = allow_data_images
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img" and self.allow_data_images:
            src = dict(attrs).get("src") or ""
            if not re.fullmatch(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/]*={0,2}", src):
                self.found.append(f"<img src={src[:60]!r}>")
            attrs = [(k, v) for k, v in attrs if k != "src"]
        elif tag not in TAGS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = value or ""
            if name not in ATTRIBUTES:
                self.found.append(f"<{tag} {name}=...>")
            elif name == "href" and url_scheme(value) not in (None, *SCHEMES):
                self.found.append(f"<{tag} href={value[:60]!r}>")
            elif name == "style" and any(bad in value.lower() for bad in CSS_LOADS):
                self.found.append(f"<{tag} style={value[:60]!r}>")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_comment(self, data: str) -> None:
        self.found.append("<!-- comment -->")  # the renderer makes none: one that got through is raw HTML

    def handle_decl(self, decl: str) -> None:
        self.found.append(f"<!{decl[:30]}>")

    def handle_pi(self, data: str) -> None:
        self.found.append(f"<?{data[:30]}>")

    def unknown_decl(self, data: str) -> None:
        self.found.append(f"<![{data[:30]}>")


def live_parts(html: str, *, allow_data_images: bool = False) -> list[str]:
    """Every element or attribute in ``html`` that could run or fetch by itself (empty: none)."""
    finder = _Finder(allow_data_images)
    finder.feed(html)
    finder.close()
    return finder.found
