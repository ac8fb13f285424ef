"""The text-loop guard on a real model that repeats itself: llama.cpp's server, SmolLM2-135M-Instruct, greedy.

``benchmarks/text_loop.py`` times the same run with the guard off and on (the README's figure); here the cell is
checked: it ends with a ``NoProgress`` error that names the repeated line, long before the output cap, and the
server stops generating when the stream is cut.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kernel_client import KernelSession, agent_kernel
from llama_server import MODEL_NAME, LlamaServer
from realmodel_support import SYSTEM, assert_generation_cancelled

pytestmark = pytest.mark.realmodel

POEM_PROMPT = "Write a poem about the sea."
"""Greedy SmolLM2-135M-Instruct writes a few lines of it, then repeats one ("A place ...") until its output cap."""
CAP = 1024  # tokens: about 3,600 characters of the poem when nothing cuts it (50-90 s here)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with agent_kernel(tmp_path_factory.mktemp("realmodel_text_loop")) as ks:
        ks.ok("%autoawait True")
        yield ks


def test_a_poem_that_repeats_a_line_is_cut_long_before_the_output_cap(kernel: KernelSession,
                                                                       idle_llama: LlamaServer):
    cell = kernel.run(f'%%agent --api chat --base-url {idle_llama.api_url} -m {MODEL_NAME} --tools "" '
                      f'--system "{SYSTEM}" --max-output-tokens {CAP} --max-seconds 240\n{POEM_PROMPT}', timeout=300)
    assert [e["ename"] for e in cell.errors] == ["NoProgress"], cell.describe()
    detail = cell.errors[0]["evalue"]
    print(detail)
    assert detail.startswith("NO_PROGRESS") and "came back 10 times" in detail
    assert kernel.value("_agent.status") == "no_progress"
    kept = kernel.value("_agent.history[-1]['content']")
    repeated = detail.split("'")[1]  # the line the detail names is the one the text repeats
    assert kept.count(repeated.rstrip(",.;:!?")) >= 5  # the line really repeats (its endings vary)
    assert len(kept) < 1000  # of the ~3,600 characters the cap allows
    assert_generation_cancelled(idle_llama, "text loop")
