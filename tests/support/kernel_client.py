"""Drive a real IPython kernel over ZMQ the way a notebook front end does, for the ``%%agent`` kernel tests.

One :class:`KernelSession` owns a kernel started with ``jupyter_client``. :meth:`KernelSession.submit` sends an
``execute_request`` and returns a :class:`Cell` that collects the iopub messages and the ``execute_reply`` whose
parent is that request, so several cells can be queued at once (as a front end does when you run a cell while
another one is busy). Every message is stamped with ``time.monotonic()`` when the client receives it, so a test can
measure how soon a cell went idle after a click or an interrupt.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import queue
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from jupyter_client import KernelManager

Message = dict[str, Any]

# Environment variables the magic reads; the kernel starts without any of them so every test sets what it needs.
AGENT_ENV = ("CI", "AGENTKERNEL_NONINTERACTIVE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTKERNEL_MODEL",
             "AGENTKERNEL_TRANSCRIPTS")


def kernel_env(root: Path, **extra: str) -> dict[str, str]:
    """This process's environment for a kernel whose files go under ``root``.

    None of the variables the magic reads is passed on (tests set them in the kernel); transcripts go to
    ``root/transcripts`` and IPython's profile (config, input history) to ``root/ipython``, so neither a
    developer's ``ipython_config.py`` nor their history is involved.
    """
    env = {k: v for k, v in os.environ.items() if k not in AGENT_ENV}
    env["AGENTKERNEL_TRANSCRIPTS"] = str(root / "transcripts")
    env["IPYTHONDIR"] = str(root / "ipython")
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # no debugger warning on stderr
    env.update(extra)
    return env


class Cell:
    """One submitted cell: its iopub messages (with receipt times) and its execute_reply."""

    def __init__(self, session: KernelSession, msg_id: str, code: str):
        self.session = session
        self.msg_id = msg_id
        self.code = code
        self.sent_at = time.monotonic()

    # -- collecting ------------------------------------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        return [m for _, m in self.session.iopub[self.msg_id]]

    @property
    def idle_at(self) -> float | None:
        for received, msg in self.session.iopub[self.msg_id]:
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return received
        return None

    @property
    def reply(self) -> Message | None:
        return self.session.replies.get(self.msg_id)

    @property
    def done(self) -> bool:
        return self.idle_at is not None and self.reply is not None

    def wait(self, timeout: float = 30.0) -> Cell:
        """Pump messages until the cell is idle and its reply has come."""
        deadline = time.monotonic() + timeout
        while not self.done:
            if time.monotonic() > deadline:
                raise TimeoutError(f"cell did not finish in {timeout} s: {self.code[:80]!r}\n{self.describe()}")
            self.session.pump(0.02)
        return self

    def wait_for(self, predicate: Callable[[Message], bool], timeout: float = 30.0) -> Message:
        """Pump until one of this cell's iopub messages satisfies ``predicate``; return it."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            msgs = self.messages
            for msg in msgs[seen:]:
                if predicate(msg):
                    return msg
            seen = len(msgs)
            if self.done or time.monotonic() > deadline:
                raise TimeoutError(f"no matching message for {self.code[:80]!r}\n{self.describe()}")
            self.session.pump(0.02)

    def wait_for_button(self, description: str, timeout: float = 30.0) -> str:
        """Wait for the comm_open of an ipywidgets Button with this description; return its comm id."""
        msg = self.wait_for(lambda m: button_description(m) == description, timeout)
        return msg["content"]["comm_id"]

    def wait_for_widget(self, model_name: str, timeout: float = 30.0) -> str:
        """Wait for the comm_open of an ipywidgets model (``"TextModel"``); return its comm id."""
        msg = self.wait_for(lambda m: widget_state(m).get("_model_name") == model_name, timeout)
        return msg["content"]["comm_id"]

    def states(self, comm_id: str) -> dict[str, Any]:
        """The state the kernel has sent for widget ``comm_id`` so far (its comm_open, then its updates)."""
        state: dict[str, Any] = {}
        for msg in self.of_type("comm_open", "comm_msg"):
            if msg["content"]["comm_id"] == comm_id:
                state.update(widget_state(msg))
        return state

    # -- reading ---------------------------------------------------------------------------------------------

    def of_type(self, *types: str) -> list[Message]:
        return [m for m in self.messages if m["msg_type"] in types]

    @property
    def status(self) -> str:
        assert self.reply is not None, "the cell has no reply yet"
        return self.reply["content"]["status"]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [m["content"] for m in self.of_type("error")]

    @property
    def stdout(self) -> str:
        return "".join(m["content"]["text"] for m in self.of_type("stream") if m["content"]["name"] == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(m["content"]["text"] for m in self.of_type("stream") if m["content"]["name"] == "stderr")

    @property
    def displays(self) -> list[dict[str, Any]]:
        """The ``data`` bundles of display_data and execute_result outputs, in order."""
        return [m["content"]["data"] for m in self.of_type("display_data", "execute_result")]

    @property
    def records(self) -> list[dict[str, Any]]:
        """The bundles of the runs' records (HTML and the plain text that begins ``agent: ``), in order."""
        return [d for d in self.displays if "text/html" in d and str(d.get("text/plain", "")).startswith("agent: ")]

    def record_images(self) -> list[tuple[str, str, str]]:
        """The images the run's record shows in its calls' sections: ``(mime type, data, alternative text)``, the
        data as the bundle had it (SVG as its text, the others base64)."""
        import base64
        import html
        import re

        records = [d["text/html"] for d in self.records]
        found = re.findall(r'<img src="data:([^;]+);base64,([^"]+)" alt="([^"]*)">', records[-1] if records else "")
        return [(mime, base64.b64decode(data).decode() if mime == "image/svg+xml" else data,
                 html.unescape(alt).replace("&#10;", "\n")) for mime, data, alt in found]

    def describe(self) -> str:
        lines = []
        for msg in self.messages:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                lines.append(f"  stream {content['name']}: {content['text'][:300]!r}")
            elif kind == "error":
                lines.append(f"  error {content['ename']}: {content['evalue'][:300]!r}")
            elif kind in ("display_data", "execute_result"):
                lines.append(f"  {kind}: {str(content['data'].get('text/plain'))[:300]!r}")
            elif kind == "status":
                lines.append(f"  status {content['execution_state']}")
        if self.reply is not None:
            lines.append(f"  reply {self.reply['content']['status']}")
        return "\n".join(lines)


def widget_state(msg: Message) -> dict[str, Any]:
    """The widget state a ``comm_open`` or a ``comm_msg`` update carries (empty for other messages)."""
    if msg["msg_type"] not in ("comm_open", "comm_msg"):
        return {}
    return msg["content"].get("data", {}).get("state", {})


def button_description(msg: Message) -> str | None:
    """The description of the Button a ``comm_open`` creates, else None."""
    if msg["msg_type"] != "comm_open":
        return None
    state = widget_state(msg)
    if state.get("_model_name") != "ButtonModel":
        return None
    return state.get("description")


class KernelSession:
    """A kernel started with ``jupyter_client`` plus a client, routing messages to the cells that caused them."""

    def __init__(self, cwd: Path, env: Mapping[str, str], kernel_name: str = "python3", *, log: Path | None = None):
        """``log``: a folder where the kernel process's own stdout and stderr go (``stdout.txt``, ``stderr.txt``:
        what a user sees in the terminal or the Jupyter server's log, never in a cell)."""
        self.cwd = cwd
        self.env = dict(env)
        self.km = KernelManager(kernel_name=kernel_name)
        streams = {}
        if log is not None:
            log.mkdir(parents=True, exist_ok=True)
            streams = {name: open(log / f"{name}.txt", "wb") for name in ("stdout", "stderr")}  # noqa: SIM115
        try:
            self.km.start_kernel(cwd=str(cwd), env=dict(env), **streams)
        finally:
            for stream in streams.values():  # (the kernel holds its own copies)
                stream.close()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.iopub: defaultdict[str, list[tuple[float, Message]]] = defaultdict(list)
        self.replies: dict[str, Message] = {}

    def shutdown(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    # -- messages --------------------------------------------------------------------------------------------

    def pump(self, timeout: float) -> None:
        """Take every waiting iopub and shell message (waiting up to ``timeout`` for the first)."""
        wait = timeout
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=wait)
            except queue.Empty:
                break
            self.iopub[msg["parent_header"].get("msg_id", "")].append((time.monotonic(), msg))
            wait = 0
        while True:
            try:
                msg = self.kc.get_shell_msg(timeout=0)
            except queue.Empty:
                break
            self.replies[msg["parent_header"].get("msg_id", "")] = msg

    def settle(self, seconds: float) -> None:
        """Keep taking messages for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.pump(min(0.02, max(end - time.monotonic(), 0)))

    def submit(self, code: str, *, console: bool = False, **options: Any) -> Cell:
        """Send an execute_request (not waiting for it): a queued cell, as a notebook front end sends one (JupyterLab,
        Notebook 7 and VS Code name the cell in ``metadata.cellId``); with ``console``, as ``jupyter console`` sends
        it (no cell id: jupyter_client's default). ``options``: the request's content (``silent``, ...)."""
        content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                   "allow_stdin": True, "stop_on_error": True, **options}
        metadata = {} if console else {"cellId": f"cell-{uuid.uuid4().hex[:8]}"}
        msg = self.kc.session.msg("execute_request", content, metadata=metadata)
        self.kc.shell_channel.send(msg)
        return Cell(self, msg["header"]["msg_id"], code)

    def run(self, code: str, timeout: float = 30.0, **options: Any) -> Cell:
        return self.submit(code, **options).wait(timeout)

    def ok(self, code: str, timeout: float = 30.0) -> Cell:
        """Run ``code`` and fail with what the kernel showed unless it ran without error."""
        cell = self.run(code, timeout)
        assert cell.status == "ok" and not cell.errors, f"cell failed: {code!r}\n{cell.describe()}"
        return cell

    def value(self, expression: str) -> Any:
        """Evaluate ``expression`` in the kernel (silently, through user_expressions); it must be JSON-able."""
        cell = self.run("", silent=True, store_history=False,
                        user_expressions={"v": f"__import__('json').dumps({expression})"})
        result = cell.reply["content"]["user_expressions"]["v"]
        assert result["status"] == "ok", f"{expression}: {result.get('ename')}: {result.get('evalue')}"
        return json.loads(ast.literal_eval(result["data"]["text/plain"]))

    def click(self, comm_id: str) -> float:
        """Send the ipywidgets 8 button click for ``comm_id``; return the time it was sent."""
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id,
                                               "data": {"method": "custom", "content": {"event": "click"}}})
        self.kc.shell_channel.send(msg)
        return time.monotonic()

    def set_state(self, comm_id: str, **state: Any) -> None:
        """Send a widget state change as a front end does when the user edits it (typing into a Text)."""
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id,
                                               "data": {"method": "update", "state": state, "buffer_paths": []}})
        self.kc.shell_channel.send(msg)

    def interrupt(self) -> float:
        """Interrupt the kernel as the notebook's stop button does; return the time it was sent."""
        self.km.interrupt_kernel()
        return time.monotonic()


@contextlib.contextmanager
def agent_kernel(root: Path, files: Mapping[str, str] | None = None) -> Iterator[KernelSession]:
    """A kernel with ``%load_ext agentkernel`` done, working in ``root/cwd`` (holding ``files``), its transcripts
    and IPython profile under ``root``; shut down on exit. Test modules share one per module::

        @pytest.fixture(scope="module")
        def session(tmp_path_factory):
            with agent_kernel(tmp_path_factory.mktemp("name")) as ks:
                yield ks

    (or, when each test starts from the same setup code, :func:`kernel_fixtures`).
    """
    cwd = root / "cwd"
    cwd.mkdir()
    for name, text in (files or {}).items():
        (cwd / name).write_text(text)
    ks = KernelSession(cwd, kernel_env(root))
    try:
        ks.ok("%load_ext agentkernel")
        yield ks
    finally:
        ks.shutdown()


def kernel_fixtures(name: str, setup: str) -> tuple[Any, Any]:
    """The two fixtures of a kernel test module: ``session``, one :func:`agent_kernel` for the module, and
    ``kernel``, that kernel after ``setup`` has run again (before each test)::

        session, kernel = kernel_fixtures("panel_kernel", SETUP)
    """
    import pytest

    @pytest.fixture(scope="module")
    def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
        with agent_kernel(tmp_path_factory.mktemp(name)) as ks:
            yield ks

    @pytest.fixture
    def kernel(session: KernelSession) -> KernelSession:
        session.ok(setup)
        return session

    return session, kernel
