"""Small helpers shared by the runtime tests (no Jupyter, no network)."""

from __future__ import annotations

import asyncio
from typing import Any

from agentkernel import LoopResult, run


def run_sync(prompt: str | None, **options: Any) -> LoopResult:
    """Run the loop to its end in a fresh event loop."""
    return asyncio.run(run(prompt, **options))


def outputs(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in history if item["type"] == "function_call_output"]


def calls(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for item in history if item["type"] == "function_call"]


def output_of(history: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    (item,) = [i for i in outputs(history) if i["call_id"] == call_id]
    return item
