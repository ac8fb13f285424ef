"""Model and tool text is data, never markup, in JupyterLab and Notebook 7 with Chromium.

A run whose streamed text, answer, tool arguments, tool outputs, a tool's displays and an approval hold hostile
markup (:mod:`hostile_text`: scripts and handlers that would set ``window.pwned``, frames, remote images by HTML,
Markdown, reference, ``srcset`` and CSS, TeX's ``\\href``): no script runs and no request leaves for another host
while the run is live (at its approval and once it ended), after the user's own notebook is saved and reopened
trusted (signed, a fresh server and kernel), and in ``jupyter nbconvert --to html`` of it opened in Chromium. The
rendered page is searched too: no element that runs or loads, no link to a URL other than http, https or mailto.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import nbformat
import pytest
from hostile_text import EVIL_HOST, TOOLS
from lab import NotebookPage, start_lab, wait_saved
from live_html import live_parts

expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = pytest.mark.browser

SETUP = f"""\
%load_ext agentkernel
{TOOLS}
m = ScriptedModel([Turn(text=HOSTILE, calls=[Call("lookup", {{"q": HOSTILE}})]),
                   Call("write_note", {{"text": HOSTILE}}), HOSTILE])
"""
AGENT = "%%agent -m m --tools lookup,write_note\nLook it up and write a note."

# Everything in the outputs that runs or loads, found in the rendered page (the front ends' own DOM included).
LIVE_IN_PAGE = """() => {
    const found = [];
    const loads = ['script', 'iframe', 'frame', 'object', 'embed', 'video', 'audio', 'source', 'track', 'link',
                   'base', 'meta', 'form', 'style', 'portal'];
    for (const area of document.querySelectorAll('.jp-OutputArea')) {
        for (const el of area.querySelectorAll('*')) {
            const tag = el.tagName.toLowerCase();
            if (loads.includes(tag)) found.push('<' + tag + '>');
            for (const a of el.attributes) {
                const n = a.name.toLowerCase();
                if (n.startsWith('on') || ['srcset', 'poster', 'background', 'formaction'].includes(n))
                    found.push(tag + ' ' + n);
            }
            if (tag === 'img' || tag === 'image') {
                const src = el.getAttribute('src') || el.getAttribute('href') || '';
                if (!src.startsWith('data:image/')) found.push(tag + ' ' + src.slice(0, 80));
            }
            if (el.hasAttribute('href') && tag !== 'image') {
                const href = el.href && el.href.baseVal !== undefined ? el.href.baseVal : el.href;
                const protocol = new URL(href, document.baseURI).protocol;
                if (!['http:', 'https:', 'mailto:'].includes(protocol)) found.push(tag + ' href ' + href.slice(0, 80));
            }
            const bg = getComputedStyle(el).backgroundImage;
            if (bg && bg.includes('""" + EVIL_HOST + """')) found.push('background ' + bg.slice(0, 80));
        }
    }
    return found;
}"""


class Watched:
    """A browser context whose every request is kept; requests to other hosts than the server are refused (and
    kept)."""

    def __init__(self, browser: Any, allowed: tuple[str, ...] = ("127.0.0.1",)):
        self.context = browser.new_context(viewport={"width": 1280, "height": 1000})
        self.allowed = allowed
        self.urls: list[str] = []
        self.context.on("request", lambda request: self.urls.append(request.url))
        self.context.route(re.compile(r"^(https?|wss?)://"), self.route)

    def route(self, route: Any) -> None:
        if urlparse(route.request.url).hostname in self.allowed:
            route.continue_()
        else:
            route.abort()

    def foreign(self) -> list[str]:
        """The requests that went for another host than the server's."""
        return [u for u in self.urls if urlparse(u).scheme in ("http", "https", "ws", "wss")
                and urlparse(u).hostname not in self.allowed]


def assert_inert(nb_page: Any, watched: Watched, when: str) -> None:
    """No hostile script or handler ran, nothing was fetched from another host, nothing live is on the page."""
    assert nb_page.evaluate("() => window.pwned") is None, f"{when}: a script or handler ran"
    assert watched.foreign() == [], f"{when}: requests left for another host"
    assert nb_page.evaluate(LIVE_IN_PAGE) == [], when


def test_a_hostile_answer_runs_nothing_live_after_reopening_and_in_nbconvert(
        front_end: str, browser: Any, tmp_path: Path) -> None:
    root, name = tmp_path / "root", "hostile.ipynb"
    root.mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                       "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(SETUP, id="setup"), nbformat.v4.new_code_cell(AGENT, id="agent")]
    nbformat.write(notebook, root / name)
    # One signature database for both servers: the reopened notebook is the user's own, trusted.
    signatures = (f"--NotebookNotary.db_file={tmp_path / 'signatures.db'}",
                  f"--NotebookNotary.secret_file={tmp_path / 'notary_secret'}")

    server = start_lab(root, tmp_path / "work-1", front_end=front_end, options=signatures)
    try:
        watched = Watched(browser)
        nb = NotebookPage(watched.context, server, name)
        nb.run_and_wait(0, 60)
        nb.run(1)
        approve = nb.button(1, "Approve")
        expect(approve).to_be_enabled(timeout=30_000)
        expect(nb.output(1)).to_contain_text("lookup(")  # the live panel: the message, the first call
        expect(nb.output(1)).to_contain_text("<script>window.pwned=1</script>")  # shown as text
        assert_inert(nb.page, watched, "live, at the approval")
        approve.click()
        nb.wait_done(1, 60)
        expect(nb.status(1)).to_contain_text("agent: complete")
        record = nb.record(1)
        expect(record.locator("a", has_text="image: chart").first).to_have_attribute(
            "href", f"http://{EVIL_HOST}/leak?data=SECRET")  # a link to click, not an image loaded
        expect(record.locator("strong", has_text="bold").first).to_be_visible()  # Markdown still rendered
        expect(record.locator("table").first).to_be_visible()
        for section in range(nb.sections(1).count()):  # every section open: its images and text rendered
            nb.sections(1).nth(section).locator("summary").click()
        expect(record.locator('img[src^="data:image/png;base64,"]').first).to_be_attached()  # the tool's figure
        assert_inert(nb.page, watched, "after the run")
        nb.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        saved = wait_saved(root / name, lambda s: any("text/html" in o.get("data", {})
                                                      for o in s.cells[1].outputs))
        nb.close()
        watched.context.close()
    finally:
        server.stop()

    # What was saved: every HTML part inert, no Markdown part, and the file signed (trusted when reopened).
    for output in saved.cells[1].outputs:
        data = output.get("data", {})
        assert "text/markdown" not in data
        assert live_parts(str(data.get("text/html", "")), allow_data_images=True) == []
    from nbformat.sign import NotebookNotary

    notary = NotebookNotary(db_file=str(tmp_path / "signatures.db"), secret_file=str(tmp_path / "notary_secret"))
    assert notary.check_signature(nbformat.read(root / name, as_version=4)), "the saved notebook is not signed"

    server = start_lab(root, tmp_path / "work-2", front_end=front_end, options=signatures)
    try:
        watched = Watched(browser)
        nb = NotebookPage(watched.context, server, name)
        expect(nb.record(1).locator("a", has_text="image: chart")).to_have_count(2)  # the message, the answer
        for section in range(nb.sections(1).count()):
            nb.sections(1).nth(section).locator("summary").click()
        expect(nb.record(1).locator('img[src^="data:image/png;base64,"]').first).to_be_attached()
        assert_inert(nb.page, watched, "reopened, trusted")
        nb.close()
        watched.context.close()
    finally:
        server.stop()

    # nbconvert's page: only the template's own assets may be asked for (those of a harmless notebook's page).
    def converted(path: Path) -> Path:
        html = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--stdout", str(path)],
                              capture_output=True, text=True, check=True, timeout=120).stdout
        page = path.with_suffix(".html")
        page.write_text(html)
        return page

    harmless = tmp_path / "harmless.ipynb"
    plain = nbformat.v4.new_notebook()
    plain.cells = [nbformat.v4.new_code_cell("1", outputs=[nbformat.v4.new_output(
        "execute_result", {"text/plain": "1", "text/html": "<b>1</b>"}, execution_count=1)])]
    nbformat.write(plain, harmless)
    pages = {}
    for path in (harmless, root / name):
        watched = Watched(browser, allowed=())
        page = watched.context.new_page()
        page.goto(converted(path).as_uri())
        page.wait_for_load_state("load")
        pages[path.name] = (page, watched, {urlparse(u).hostname for u in watched.foreign()})
    page, watched, hosts = pages[name]
    assert hosts <= pages["harmless.ipynb"][2], hosts  # nothing but the template's own assets
    assert EVIL_HOST not in " ".join(watched.urls)
    assert page.evaluate("() => window.pwned") is None, "nbconvert's page ran a script or handler"
    assert page.locator("a", has_text="image: chart").count() == 2
    assert page.evaluate(LIVE_IN_PAGE) == []
    for _, watched, _ in pages.values():
        watched.context.close()
