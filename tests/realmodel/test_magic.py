"""``%%agent --api chat|responses --base-url ...`` in a real kernel against llama.cpp's server and a real model.

The kernel is driven over ZMQ as a notebook front end drives it (``tests/support/kernel_client.py``). What is asserted
holds for any model: statuses, the history invariant, Stop and ``--max-seconds`` cancelling the server's
generation, and a replay (with the server stopped) equal to the recorded run. Never the tiny model's wording.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_client import Cell, KernelSession, agent_kernel
from llama_server import MODEL_NAME, LlamaServer
from realmodel_support import CALL_PROMPT, RAMBLE_PROMPT, SECRET, SECRET_WORD_TOOL, SYSTEM, assert_generation_cancelled

pytestmark = pytest.mark.realmodel

NO_TEXT_LOOP = "--text-repeats 0"
"""The ramble repeats itself ("SELF-SELF-..."), which the text-loop guard cuts at once (tests/realmodel/
test_text_loop_llama.py); these tests are about Stop, the wall clock and the output cap, so it is off here."""

RUN = 300  # seconds a cell may take on a busy two-core machine (the runs here take 3-20 s)

CHECKS = """\
def _calls(result):
    outputs = {i["call_id"]: i["output"] for i in result.history if i["type"] == "function_call_output"}
    return [[i["name"], outputs[i["call_id"]]] for i in result.history if i["type"] == "function_call"]
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with agent_kernel(tmp_path_factory.mktemp("realmodel_kernel")) as ks:
        ks.ok("%autoawait True")
        ks.ok("import agentkernel\nfrom agentkernel import tool\n" + SECRET_WORD_TOOL + CHECKS)
        yield ks


def agent_cell(server: LlamaServer, prompt: str, options: str = "", api: str = "chat") -> str:
    """An ``%%agent`` cell for the server, offering only ``secret_word`` and a short system prompt."""
    return (f'%%agent --api {api} --base-url {server.api_url} -m {MODEL_NAME} --tools secret_word '
            f'--system "{SYSTEM}" {options}\n{prompt}')


def headline(cell: Cell) -> str:
    """The first line of the run's static rendering (``agent: complete · 2 rounds · ...``)."""
    (bundle,) = cell.records
    return bundle["text/plain"].splitlines()[0]


def assert_valid_history(kernel: KernelSession) -> None:
    assert kernel.value("agentkernel.validate_history(_agent.history) or 'valid'") == "valid"


def test_agent_cell_with_a_real_tool_call(kernel: KernelSession, idle_llama: LlamaServer):
    cell = kernel.run(agent_cell(idle_llama, CALL_PROMPT, "--max-seconds 240"), timeout=RUN)
    print(headline(cell))
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert headline(cell).startswith("agent: complete")
    assert kernel.value("_agent.status") == "complete"
    assert_valid_history(kernel)
    calls = kernel.value("_calls(_agent)")
    assert calls and all(call == ["secret_word", SECRET] for call in calls)
    assert kernel.value("_agent.history[-1]['role']") == "assistant"
    assert kernel.value("bool(_agent.answer and _agent.answer.strip())") is True


def test_stop_button_cancels_the_generation_on_the_server(kernel: KernelSession, idle_llama: LlamaServer):
    cell = kernel.submit(agent_cell(idle_llama, RAMBLE_PROMPT, "--max-seconds 240 " + NO_TEXT_LOOP))
    stop = cell.wait_for_button("Stop", timeout=60)
    deadline = time.monotonic() + RUN
    while idle_llama.decoded() < 5:  # the model is writing (the prompt has been read)
        assert time.monotonic() < deadline and not cell.done, cell.describe()
        kernel.pump(0.1)
    clicked = kernel.click(stop)
    idle_at = cell.wait(30).idle_at
    assert idle_at is not None
    print(f"Stop: the cell went idle {idle_at - clicked:.2f} s after the click")
    assert idle_at - clicked < 2
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert headline(cell).startswith("agent: aborted")
    assert kernel.value("_agent.status") == "aborted"
    assert_valid_history(kernel)
    assert_generation_cancelled(idle_llama, "Stop")


def test_max_seconds_ends_a_long_generation(kernel: KernelSession, idle_llama: LlamaServer):
    started = time.monotonic()
    cell = kernel.run(agent_cell(idle_llama, RAMBLE_PROMPT, "--max-seconds 8 " + NO_TEXT_LOOP), timeout=RUN)
    took = time.monotonic() - started
    print(f"--max-seconds 8: the cell took {took:.1f} s")
    assert took < 20
    (error,) = cell.errors
    assert error["ename"] == "HitWallClock" and error["evalue"].startswith("HIT_WALL_CLOCK"), cell.describe()
    assert kernel.value("_agent.status") == "hit_wall_clock"
    assert_valid_history(kernel)
    assert_generation_cancelled(idle_llama, "--max-seconds")


def test_record_then_replay_with_the_server_stopped(kernel: KernelSession, own_llama: LlamaServer,
                                                   tmp_path: Path):
    cassette = tmp_path / "run.jsonl"
    recorded = kernel.run(agent_cell(own_llama, CALL_PROMPT, f"--max-seconds 240 --record {cassette}"),
                          timeout=RUN)
    assert recorded.status == "ok" and not recorded.errors, recorded.describe()
    kernel.ok("recorded = _agent")
    assert kernel.value("recorded.status") == "complete" and kernel.value("recorded.tool_calls") >= 1

    own_llama.stop()
    assert own_llama.process.poll() is not None
    replayed = kernel.run(agent_cell(own_llama, CALL_PROMPT, f"--max-seconds 240 --replay {cassette}"),
                          timeout=60)
    assert replayed.status == "ok" and not replayed.errors, replayed.describe()
    assert kernel.value("_agent is not recorded")
    for field in ("status", "answer", "history", "rounds", "tool_calls"):
        assert kernel.value(f"_agent.{field} == recorded.{field}") is True, field
    assert headline(replayed) == headline(recorded)


def test_responses_api_text_answer(kernel: KernelSession, idle_llama: LlamaServer):
    cell = kernel.run(agent_cell(idle_llama, "Say hello in one short sentence.", "--max-seconds 120",
                                 api="responses"), timeout=RUN)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.status") == "complete"
    assert_valid_history(kernel)
    assert kernel.value("bool(_agent.answer and _agent.answer.strip())") is True


def test_max_output_tokens_ends_the_cell_truncated(kernel: KernelSession, idle_llama: LlamaServer):
    cell = kernel.run(agent_cell(idle_llama, RAMBLE_PROMPT, "--max-seconds 120 --max-output-tokens 5 " + NO_TEXT_LOOP),
                      timeout=RUN)
    (error,) = cell.errors
    assert error["ename"] == "Truncated" and error["evalue"].startswith("TRUNCATED"), cell.describe()
    assert kernel.value("_agent.status") == "truncated"
    assert kernel.value("_agent.usage.output_tokens") <= 5
    assert_valid_history(kernel)
