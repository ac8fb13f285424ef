"""The local-models page's examples run as written: each fenced ``%%agent`` example of
``docs/local-models.md``, against llama.cpp's server with SmolLM2-135M-Instruct (the page's "The model the tests
use"), makes the tool call it is about and ends in an answer in a real kernel (issue 40: the page's example is
honest). Only ``PORT`` is filled in, with the port the server listens on."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from kernel_client import agent_kernel
from llama_server import LlamaServer

pytestmark = pytest.mark.realmodel

PAGE = Path(__file__).resolve().parents[2] / "docs" / "local-models.md"
EXAMPLES = [match[1].strip() for match in re.findall(r"^(`{3,})\w*\n(%%agent .*?)^\1$", PAGE.read_text(), re.S | re.M)]


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
        called = kernel.value("[(i['name'], i['arguments']) for i in _agent.history if i['type'] == 'function_call']")
        outputs = kernel.value("[i['output'] for i in _agent.history if i['type'] == 'function_call_output']")
        assert called and called[0] == ["read_file", '{"path": "notes.txt"}'], summary  # the example's call
        assert outputs[0] == "hello", outputs
