"""Helpers for the browser suite: a JupyterLab (or Notebook 7) server in a temporary directory, and notebooks
driven in Chromium.

The server runs in its own process group with a token, no browser, and a kernel environment without ``CI`` (so
side-effecting tools ask for approval). :class:`NotebookPage` opens one notebook (in JupyterLab, in its own
workspace) and does what a person does: run cells, click buttons, read outputs, take screenshots. Notebook 7 is
built from JupyterLab's components, so the same page helpers work in both.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "browser"
LABEXTENSION = REPO / "agentkernel" / "labextension"  # the built front-end extension (jlpm build, pip install -e .)
CHROMIUM = os.environ.get("AGENTKERNEL_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium keeps trying to reach Google on a closed network: slow, flaky.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]
MEASUREMENTS: list[str] = []  # printed at the end of the run and saved in artifacts/browser/
EXECUTED = re.compile(r"^\[\d+\]:$")  # a code cell's prompt once its execute_reply came back


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: Path, cells: list[str]) -> None:
    """A notebook of code cells with the python3 kernelspec, so JupyterLab starts the kernel without asking."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, path)


FRONT_ENDS = {"lab": "jupyterlab", "notebook": "notebook"}  # the front end's name: its module, run with -m
APP_OPTIONS = {"lab": ["--LabApp.extension_manager=readonly", "--LabApp.expose_app_in_browser=True"],
               "notebook": ["--JupyterNotebookApp.expose_app_in_browser=True"]}


@dataclass
class LabServer:
    """A running ``jupyter lab`` or ``jupyter notebook``; :meth:`stop` ends it, its kernels and anything else in its
    process group."""

    url: str
    token: str
    root: Path
    process: subprocess.Popen[bytes]
    log: Path
    children: set[int] = field(default_factory=set)
    front_end: str = "lab"

    def api(self, method: str, path: str) -> Any:
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def page_url(self, notebook: str, workspace: str) -> str:
        if self.front_end == "notebook":  # one notebook per page: no workspace to keep apart
            return f"{self.url}/notebooks/{notebook}?token={self.token}"
        return f"{self.url}/lab/workspaces/{workspace}/tree/{notebook}?token={self.token}"

    def shut_down_kernel_of(self, notebook: str) -> None:
        self.remember_children()
        for session in self.api("GET", "/api/sessions"):
            if session.get("path") == notebook:
                self.api("DELETE", f"/api/sessions/{session['id']}")

    def remember_children(self) -> None:
        """Kernels run in sessions of their own (jupyter_client), so killing our process group misses them."""
        try:
            import psutil

            self.children |= {p.pid for p in psutil.Process(self.process.pid).children(recursive=True)}
        except Exception:  # psutil missing or the server already gone: the process group kill still applies
            pass

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        self.remember_children()
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def start_lab(root: Path, work: Path, *, front_end: str = "lab", timeout: float = 90.0,
              options: tuple[str, ...] = ()) -> LabServer:
    """Start JupyterLab (``front_end="notebook"``: Notebook 7) on 127.0.0.1 (free port, fresh token) serving
    ``root``; wait until its API answers. ``options``: more command-line options for the server.

    ``work`` holds the server's log, settings, workspaces and runtime files and the kernels' transcripts, so
    nothing is read from or written to the user's own Jupyter directories.
    """
    settings = work / "settings"
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True, exist_ok=True)
    # No "would you like news?" toast over the notebook, and no update checks on a closed network.
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    for name in ("workspaces", "runtime", "config", "transcripts"):
        (work / name).mkdir(exist_ok=True)
    # The checkout's front-end extension, as its kernels import the checkout's package (PYTHONPATH): served from a
    # data directory first on JUPYTER_PATH, ahead of any copy a `pip install` put in the environment.
    data = work / "jupyter-data"
    (data / "labextensions").mkdir(parents=True, exist_ok=True)
    if (LABEXTENSION / "package.json").exists() and not (data / "labextensions" / "agentkernel").exists():
        (data / "labextensions" / "agentkernel").symlink_to(LABEXTENSION, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "AGENTKERNEL_NONINTERACTIVE")}
    env.update(
        AGENTKERNEL_TRANSCRIPTS=str(work / "transcripts"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(work / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(work / "runtime"),
        JUPYTER_CONFIG_DIR=str(work / "config"),
        JUPYTER_PATH=os.pathsep.join(filter(None, [str(data), os.environ.get("JUPYTER_PATH")])),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    port, token = free_port(), secrets.token_hex(16)
    log = work / f"{FRONT_ENDS[front_end]}.log"
    command = [
        sys.executable, "-m", FRONT_ENDS[front_end], "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        *APP_OPTIONS[front_end], "--ServerApp.terminals_enabled=False", *options,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    server = LabServer(url=f"http://127.0.0.1:{port}", token=token, root=root, process=process, log=log,
                       front_end=front_end)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter {front_end} exited with {process.returncode}:\n{server.log_tail()}")
        try:
            server.api("GET", "/api/status")
            return server
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"jupyter {front_end} did not answer within {timeout:.0f} s:\n"
                                   f"{server.log_tail()}") from None
            time.sleep(0.2)


# -- the page ------------------------------------------------------------------------------------------------

# Installed before a click: records (in the page's clock) the click, the cell's prompt turning from [*] to [n]
# (the execute_reply arrived: the cell finished) and the cell's output first showing ``word`` (the status line).
ARM_TIMER = """([cell, button, word]) => {
    const t = {word};
    const prompt = cell.querySelector('.jp-InputArea-prompt');
    button.addEventListener('click', () => { if (t.click === undefined) t.click = performance.now(); },
                            {capture: true});
    const check = () => {
        if (t.click === undefined) return;
        if (t.done === undefined && /^\\[\\d+\\]:$/.test(prompt.textContent.trim())) t.done = performance.now();
        if (t.shown === undefined && cell.querySelector('.jp-Cell-outputArea').textContent.includes(word))
            t.shown = performance.now();
    };
    new MutationObserver(check).observe(cell, {childList: true, characterData: true, subtree: true});
    window.__agentkernelTimer = t;
}"""


KERNEL_READY = """() => {
    const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const session = panel && panel.sessionContext;
    const kernel = session && session.session && session.session.kernel;
    return !!kernel && session.isReady && kernel.connectionStatus === 'connected' && kernel.status === 'idle';
}"""


@dataclass
class Latency:
    """Seconds from a click to the cell finishing, and to the panel showing the expected status."""

    done: float
    shown: float | None

    def __str__(self) -> str:
        shown = "never" if self.shown is None else f"{self.shown * 1000:.0f} ms"
        return f"cell finished {self.done * 1000:.0f} ms after the click, status shown after {shown}"


class NotebookPage:
    """One notebook open in Chromium: in JupyterLab in a workspace of its own (so no other document is restored), or
    in Notebook 7."""

    def __init__(self, context: Any, server: LabServer, notebook: str, *, timeout: float = 60.0):
        self.server = server
        self.notebook = notebook
        self.page = context.new_page()
        self.page.set_default_timeout(30_000)
        self.sent_clicks: list[dict[str, Any]] = []
        self.page.on("websocket", lambda ws: ws.on("framesent", self._on_frame))
        workspace = re.sub(r"\W", "-", Path(notebook).stem) + "-" + secrets.token_hex(3)
        self.page.goto(server.page_url(notebook, workspace), timeout=timeout * 1000)
        self.page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=timeout * 1000)
        self.wait_idle(timeout)
        if server.front_end == "lab":
            self.page.keyboard.press("Control+b")  # hide the file browser: more room for the panel in screenshots

    # -- what was sent to the kernel --------------------------------------------------------------------------

    def _on_frame(self, payload: str | bytes) -> None:
        """Keep the header of every widget click the page sends (to see whether it names a kernel subshell)."""
        data = payload.encode() if isinstance(payload, str) else payload
        if b'"comm_msg"' not in data or b'"event":"click"' not in data.replace(b" ", b""):
            return
        channel = re.search(rb'(?:^|[^a-z_])(shell|control)\{', data) or re.search(rb'"channel":\s*"(\w+)"', data)
        subshell = re.search(rb'"subshell_id":\s*"([^"]*)"', data)
        self.sent_clicks.append({
            "channel": channel.group(1).decode() if channel else None,
            "subshell_id": subshell.group(1).decode() if subshell else None,
        })

    # -- cells ---------------------------------------------------------------------------------------------------

    def cell(self, index: int) -> Any:
        return self.page.locator(".jp-Notebook .jp-Cell").nth(index)

    def prompt(self, index: int) -> Any:
        return self.cell(index).locator(".jp-InputArea-prompt")

    def output(self, index: int) -> Any:
        return self.cell(index).locator(".jp-Cell-outputArea")

    def errors(self, index: int) -> Any:
        return self.output(index).locator('[data-mime-type="application/vnd.jupyter.stderr"]')

    def status(self, index: int) -> Any:
        """The run's status line: while it runs the HTML beside the panel's Stop button, once it ended the record's
        headline (``agent: complete · 2 rounds · ...``)."""
        stop = self.page.get_by_role("button", name=re.compile(r"^\W*Stop$"))
        live = self.output(index).locator(".widget-hbox").filter(has=stop).locator(".widget-html-content")
        return live.or_(self.record(index).locator("p").first.locator("b")).first

    def record(self, index: int) -> Any:
        """The record a finished run leaves in its cell (HTML, no widget)."""
        return self.output(index).locator(".jp-RenderedHTMLCommon").filter(has_text=re.compile(r"^\s*agent: "))

    def sections(self, index: int) -> Any:
        """The record's collapsible sections, one per call."""
        return self.record(index).locator("details")

    def widget_views(self, index: int) -> Any:
        """Widget views rendered in the cell's output (the live panel; none once the run has its record)."""
        return self.output(index).locator(".jupyter-widgets")

    def stop_button(self, index: int) -> Any:
        return self.button(index, "Stop")

    def button(self, index: int, name: str) -> Any:
        return self.output(index).get_by_role("button", name=re.compile(rf"^\W*{name}$"))  # icons add a space

    def run(self, index: int) -> None:
        """Select the cell (click its prompt, as a person does) and run it with Ctrl+Enter."""
        self.prompt(index).click()
        self.page.keyboard.press("Control+Enter")
        self.wait_prompt(index, re.compile(r"^\[[*\d]+\]:$"))  # started, or already finished

    def run_and_wait(self, index: int, timeout: float = 30.0) -> None:
        self.run(index)
        self.wait_done(index, timeout)

    def wait_done(self, index: int, timeout: float = 30.0) -> None:
        self.wait_prompt(index, EXECUTED, timeout)

    def wait_prompt(self, index: int, pattern: re.Pattern[str], timeout: float = 30.0) -> None:
        from playwright.sync_api import expect

        expect(self.prompt(index)).to_have_text(pattern, timeout=timeout * 1000)

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until the notebook's kernel is connected and idle.

        The toolbar's execution indicator says idle before the session is ready, and a cell run in that moment is
        silently dropped; so ask the app itself (exposed by ``--LabApp.expose_app_in_browser``).
        """
        self.page.wait_for_function(KERNEL_READY, timeout=timeout * 1000)

    def toolbar_button(self, command: str) -> Any:
        return self.page.locator(f".jp-NotebookPanel-toolbar [data-command='{command}']")

    # -- timing and pictures ------------------------------------------------------------------------------------

    def arm_timer(self, index: int, button: Any, word: str) -> None:
        self.page.evaluate(ARM_TIMER, [self.cell(index).element_handle(), button.element_handle(), word])

    def latency(self, timeout: float = 10.0) -> Latency:
        """Wait for the armed cell to finish; return the latencies measured in the page."""
        self.page.wait_for_function("() => window.__agentkernelTimer && window.__agentkernelTimer.done",
                                    timeout=timeout * 1000)
        t = self.page.evaluate("() => window.__agentkernelTimer")
        shown = (t["shown"] - t["click"]) / 1000 if t.get("shown") is not None else None
        return Latency(done=(t["done"] - t["click"]) / 1000, shown=shown)

    def shot(self, name: str, index: int | None = None) -> Path:
        """Save a PNG of the page (scrolled to cell ``index`` if given) into artifacts/browser/."""
        if index is not None:
            self.cell(index).scroll_into_view_if_needed()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def close(self) -> None:
        try:
            self.page.close()
        finally:
            self.server.shut_down_kernel_of(self.notebook)


def wait_saved(path: Path, done: Callable[[Any], bool], timeout: float = 30.0) -> Any:
    """The notebook on disk once ``done`` holds for it (the save is asynchronous)."""
    deadline = time.monotonic() + timeout
    while True:
        saved = nbformat.read(path, as_version=4)
        if done(saved):
            return saved
        assert time.monotonic() < deadline, f"{path.name} was not saved as expected: {saved.cells}"
        time.sleep(0.2)
