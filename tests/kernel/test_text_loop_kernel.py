"""The text-loop guard through the magic in a real kernel: a looping response ends the cell with a no-progress error;
``--text-repeats 0`` switches it off and 1 is refused."""

from __future__ import annotations

import pytest
from kernel_client import KernelSession, agent_kernel

SENTENCE = "She loved to be brave. "

# -- through the magic -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("text_loop")) as ks:
        ks.ok("from agentkernel import ScriptedModel\n"
              f"looping = ScriptedModel(lambda req: 'Let me think. ' + {SENTENCE!r} * 200)")
        yield ks


def test_a_looping_response_ends_the_cell_with_a_no_progress_error(kernel: KernelSession):
    cell = kernel.run("%%agent -m looping --tools ''\ntell me a story")
    assert [e["ename"] for e in cell.errors] == ["NoProgress"], cell.describe()
    assert cell.errors[0]["evalue"].startswith("NO_PROGRESS")
    assert "She loved to be brave." in cell.errors[0]["evalue"]
    assert kernel.value("_agent.status") == "no_progress"
    assert kernel.value("_agent.history[-1]['content'].count('She loved')") in range(10, 15)


def test_text_repeats_0_switches_it_off_and_1_is_refused(kernel: KernelSession):
    kernel.ok("%%agent -m looping --tools '' --text-repeats 0\ntell me a story")
    assert kernel.value("(_agent.status, _agent.answer.count('She loved'))") == ["complete", 200]
    kernel.ok("%config AgentMagics.text_repeats = 30")
    try:
        cell = kernel.run("%%agent -m looping --tools ''\ntell me a story")
        assert [e["ename"] for e in cell.errors] == ["NoProgress"], cell.describe()
        assert kernel.value("_agent.history[-1]['content'].count('She loved')") in range(30, 35)
    finally:
        kernel.ok("%config AgentMagics.text_repeats = 10")
    cell = kernel.run("%%agent -m looping --tools '' --text-repeats 1\ntell me a story")
    assert [e["ename"] for e in cell.errors] == ["AgentConfigError"], cell.describe()
    assert "--text-repeats needs 0 (off) or at least 2" in cell.errors[0]["evalue"]
