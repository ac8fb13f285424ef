"""The local-models page's examples run as written: each fenced ``%%agent`` example of
``docs/local-models.md``, against llama.cpp's server with SmolLM2-135M-Instruct (the page's "The model the tests
use"), ends in an answer in a real kernel. Only ``PORT`` is filled in, with the port the server listens on."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from kernel_client import agent_kernel
from llama_server import LlamaServer

pytestmark = pytest.mark.realmodel

PAGE = Path(__file__).resolve().parents[2] / "docs" / "local-models.md"
EXAMPLES = [block.strip() for block in re.findall(r"```\w*\n(%%agent .*?)```", PAGE.read_text(), re.S)]


def test_the_page_has_examples_to_run():
    assert EXAMPLES, "no fenced %%agent example in docs/local-models.md"


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_example_on_the_page_ends_in_an_answer(example: str, idle_llama: LlamaServer, tmp_path: Path):
    cell_text = example.replace("http://127.0.0.1:PORT", idle_llama.url)
    with agent_kernel(tmp_path, {"notes.txt": "hello\n"}) as kernel:
        started = time.monotonic()
        cell = kernel.run(cell_text, timeout=600)
        took = time.monotonic() - started
        summary = kernel.value("_agent.summary + f' ({_agent.usage.input_tokens} tokens in)'")
        print(f"{took:.1f} s: {summary}")
        assert cell.status == "ok" and not cell.errors, cell.describe()
        assert kernel.value("(_agent.status, bool((_agent.answer or '').strip()))") == ["complete", True], summary
