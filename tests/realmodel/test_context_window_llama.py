"""The context window against llama.cpp's server (n_ctx 4096) and SmolLM2: long histories compact, not fail.

Each test has a server of its own: the session's server's prompt cache is left as the other realmodel tests expect it
(the tiny model's greedy output depends on what the cache holds).

Without compaction, a history of 8 rounds of ~1.5 KB tool outputs makes the server refuse the first request
("request (5532 tokens) exceeds the available context size (4096 tokens)") and the run ends ``fatal_error``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_client import KernelSession, agent_kernel
from llama_server import CONTEXT, MODEL_NAME, LlamaServer
from realmodel_support import CALL_PROMPT, SECRET, SYSTEM

from agentkernel import Call, Limits, OpenAIChatModel, ScriptedModel, run, tool, validate_history

pytestmark = pytest.mark.realmodel

RUN = 600  # seconds: a compacted prompt of ~1,500 tokens is evaluated at 30-80 tokens/s on one busy core


def log_chunk(n: int) -> str:
    """~1.5 KB of a made-up log (about 700 of SmolLM2's tokens)."""
    return "\n".join(f"{n:03d}.{i:02d} sensor={n * 7 % 13} reading={(n * 31 + i * 17) % 997} status=ok"
                     for i in range(36))


@tool
def read_log(n: int) -> str:
    """Read part n of the log."""
    return log_chunk(n)


def transcript_of(rounds: int, path: Path) -> Path:
    """A transcript of a run that read ``rounds`` parts of the log (a probe of the context window used 8 and 20)."""
    script = [Call("read_log", {"n": i}) for i in range(rounds)] + ["I read the log."]
    result = asyncio.run(run("Read the log.", model=ScriptedModel(script), tools=[read_log], transcript=path))
    assert result.status == "complete"
    return path


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with agent_kernel(tmp_path_factory.mktemp("realmodel_context")) as ks:
        ks.ok("%autoawait True")
        ks.ok("import agentkernel\nfrom agentkernel import tool\n"
              "@tool\ndef read_log(n: int) -> str:\n    'Read part n of the log.'\n    return ''\n")
        yield ks


def test_continue_from_a_20_round_transcript_answers_instead_of_failing(kernel: KernelSession,
                                                                        own_llama: LlamaServer, tmp_path: Path):
    path = transcript_of(20, tmp_path / "long.jsonl")
    sizes = [len(json.dumps(line)) for line in path.read_text().splitlines()]
    assert sum(sizes) > 30_000  # far more than 4,096 tokens
    cell = kernel.run(f'%%agent --api chat --base-url {own_llama.api_url} -m {MODEL_NAME} --tools read_log '
                      f'--system "{SYSTEM}" --continue {path} --max-output-tokens 48 --max-seconds {RUN - 60}\n'
                      "In one sentence: what did you read?", timeout=RUN)
    print(kernel.value("_agent.summary"), kernel.value("_agent.compactions"), kernel.value("_agent.usage.requests"))
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.status") in ("complete", "truncated")  # it answered (48 tokens may cut it short)
    assert kernel.value("_agent.compactions") >= 1
    assert kernel.value("len([i for i in _agent.history if i['type'] == 'function_call_output'])") == 20
    assert kernel.value("agentkernel.validate_history(_agent.history) or 'valid'") == "valid"
    assert kernel.value("bool(_agent.answer and _agent.answer.strip())") is True


def test_a_run_whose_history_outgrows_the_window_keeps_going(own_llama: LlamaServer):
    @tool
    def secret_word() -> str:
        """Return the secret word."""
        return f"The secret word is {SECRET}.\n" + log_chunk(99)

    script = [Call("read_log", {"n": i}) for i in range(4)] + ["I read the log."]
    earlier = asyncio.run(run("Read the log.", model=ScriptedModel(script), tools=[read_log]))
    model = OpenAIChatModel(MODEL_NAME, base_url=own_llama.api_url, max_output_tokens=48)
    assert asyncio.run(model.discover_context_window()) == CONTEXT  # from llama.cpp's /props
    result = asyncio.run(run(CALL_PROMPT, model=model, tools=[read_log, secret_word], system=SYSTEM,
                             history=earlier.history, limits=Limits(max_seconds=RUN - 60, max_iterations=6)))
    print(result.summary, result.compactions, result.usage)
    assert result.status not in ("fatal_error", "context_overflow"), result.summary
    assert result.compactions >= 1 and result.usage.requests >= 2
    validate_history(result.history)
    assert [o["output"] for o in result.history if o["type"] == "function_call_output"][:4] == [
        log_chunk(i) for i in range(4)]
