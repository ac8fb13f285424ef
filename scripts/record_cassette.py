"""Record notebooks/cassettes/real_model.jsonl, the cassette that notebook 10 replays in CI.

This machine has no internet, so the "real model" here is a local stand-in: the loopback OpenAI-compatible
server from tests/openai_server.py, which answers the Responses API with scripted SSE streams. Everything
between the loop and that socket is real: the loop, the built-in tools, ``OpenAIResponsesModel`` and the
``openai`` SDK over HTTP, wrapped in ``RecordingModel`` exactly as ``%%agent --record FILE`` wraps it.

To record against OpenAI itself, use the magic in a notebook instead (same cassette format)::

    %%agent -m gpt-4.1-mini --record cassettes/my_run.jsonl
    What does cassettes/README.md say this folder is for?

Usage: python scripts/record_cassette.py   (overwrites notebooks/cassettes/real_model.jsonl)
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CASSETTE = NOTEBOOKS / "cassettes" / "real_model.jsonl"
sys.path.insert(0, str(ROOT / "tests"))  # the loopback server the adapter tests use

from openai_server import Reply, ScriptedServer, responses_events  # noqa: E402

from agentkernel import run, validate_history  # noqa: E402
from agentkernel.file_tools import file_tools  # noqa: E402
from agentkernel.models.cassette import RecordingModel  # noqa: E402
from agentkernel.models.openai_responses import OpenAIResponsesModel  # noqa: E402

MODEL = "local-stand-in"
"""The model name sent to the stand-in server (it ignores it); the replay calls itself "replay of local-stand-in"."""
PROMPT = "What does cassettes/README.md say this folder is for? Answer in one sentence."
"""Notebook 10 replays with this exact prompt: the replay checks that each request matches the recording."""
FAKE_KEY = "sk-stand-in-0123456789abcdef"
"""Sent as the API key, so the notebook can show that the cassette does not contain it."""

ANSWER = ("It holds recorded model runs (cassettes) that the notebooks replay with `%%agent --replay`, "
          "so they run in CI with no network and no API key.")

REPLIES = [
    # Round 1: the model reads the file (text first, then one function call).
    Reply(responses_events(["I'll ", "read ", "the ", "file."],
                           calls=[("call_stand_in_1", "read_file", json.dumps({"path": "cassettes/README.md"}))],
                           usage=(412, 23))),
    # Round 2: it answers from what the tool returned.
    Reply(responses_events([ANSWER[i:i + 24] for i in range(0, len(ANSWER), 24)], usage=(530, 31))),
]


async def record() -> None:
    CASSETTE.unlink(missing_ok=True)  # RecordingModel appends; start afresh
    with ScriptedServer(*REPLIES) as server:
        model = RecordingModel(OpenAIResponsesModel(MODEL, base_url=server.url, api_key=FAKE_KEY), CASSETTE)
        result = await run(PROMPT, model=model, tools=file_tools(NOTEBOOKS))
        sent = [r.body for r in server.requests]
    validate_history(result.history)
    if result.status != "complete":
        raise SystemExit(f"the recorded run did not complete: {result.message}")
    function_outputs = [item for item in sent[-1]["input"] if item.get("type") == "function_call_output"]
    if not function_outputs or "cassettes" not in function_outputs[0]["output"]:
        raise SystemExit("the model never saw the README: is notebooks/cassettes/README.md there?")
    if FAKE_KEY in CASSETTE.read_text(encoding="utf-8"):
        raise SystemExit("the cassette contains the API key")
    print(f"recorded {len(sent)} requests to {CASSETTE.relative_to(ROOT)}: {result.summary}")


if __name__ == "__main__":
    asyncio.run(record())
