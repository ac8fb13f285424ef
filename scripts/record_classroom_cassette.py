"""Record notebooks/cassettes/classroom_gateway.jsonl, the cassette notebook 17 replays: a run that an LLM gateway
ends for the key's budget.

The gateway is ``tests/support/gateway_server.py``, a loopback server that answers as the LiteLLM proxy does (its
``/key/info``, and a spent key's refusal: HTTP 429, ``error.type`` ``budget_exceeded``). The key's budget pays for
one request: the model's first answer (a ``lookup`` call) goes through, the second request is refused. The run goes
through the real ``openai`` SDK and ``OpenAIChatModel`` (``%%agent --api chat``), wrapped in the ``RecordingModel``
that ``%%agent --record FILE`` uses; the cassette keeps the refusal as a gateway budget error, so the replay ends
``gateway_budget`` as the live run did::

    %%agent --api chat -m gpt-4.1-mini --tools lookup --record cassettes/classroom_gateway.jsonl
    Define entropy.

Usage: ``python scripts/record_classroom_cassette.py`` (overwrites the cassette), then re-run notebook 17
(``bash scripts/run_notebooks.sh notebooks/17_classroom.ipynb``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

from gateway_server import GatewayServer  # noqa: E402
from openai_server import Reply, chat_events  # noqa: E402

from agentkernel import run, tool, validate_history  # noqa: E402
from agentkernel.models.cassette import RecordingModel  # noqa: E402
from agentkernel.models.openai_chat import OpenAIChatModel  # noqa: E402

CASSETTE = ROOT / "notebooks" / "cassettes" / "classroom_gateway.jsonl"
PROMPT = "Define entropy."
KEY = "sk-ds101-alice-virtual-key-0000"


@tool
def lookup(word: str) -> str:
    """Look a word up in the course glossary."""
    return {"entropy": "the expected surprise of a random variable"}.get(word, "not in the glossary")


async def record() -> None:
    CASSETTE.unlink(missing_ok=True)  # record afresh
    call = Reply(chat_events(calls=[("call_1", "lookup", ['{"word": "entropy"}'])], usage=(120, 12)))
    with GatewayServer(KEY, call, max_budget=0.01, cost=0.01, alias="ds101-alice") as gateway:
        model = RecordingModel(OpenAIChatModel("gpt-4.1-mini", base_url=gateway.url, api_key=KEY, max_retries=0),
                               str(CASSETTE))
        result = await run(PROMPT, model=model, tools=[lookup])
    validate_history(result.history)
    if result.status != "gateway_budget" or KEY in CASSETTE.read_text():
        raise SystemExit(f"the recorded run did not end as the gateway's budget stop: {result.summary}")
    print(f"recorded {result.rounds} requests to {CASSETTE.relative_to(ROOT)}: {result.summary}")


if __name__ == "__main__":
    asyncio.run(record())
