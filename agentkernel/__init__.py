"""agentkernel: a bounded agent loop that runs inline in a Jupyter kernel.

``%load_ext agentkernel`` registers the ``%%agent`` magic; the loop itself (:func:`run`) has no Jupyter in it.
The names below are imported when first used (as IPython does for its own), so ``import agentkernel`` and
``%load_ext agentkernel`` load no model SDK: ``openai`` comes with the first OpenAI model, ``mcp`` with the first
server.
"""

from __future__ import annotations

import importlib
from typing import Any

from ._version import __version__

_HOMES = {
    ".briefing": ("DEFAULT_SYSTEM_PROMPT",),
    ".endings": ("STATUSES", "Status"),
    ".errors": ("AgentConfigError",),
    ".guards": ("GuardConfig",),
    ".loop": ("AgentLoop", "run"),
    ".models": ("AnthropicMessagesModel", "Call", "Model", "ModelError", "ModelRequest", "OpenAIChatModel",
                "OpenAIResponsesModel", "RecordingModel", "ReplayModel", "ScriptedModel", "Turn"),
    ".pricing": ("Price",),
    ".record.history": ("HistoryError", "repair_history", "validate_history"),
    ".listeners.transcript": ("load_transcript",),
    ".result": ("LoopResult",),
    ".stop": ("StopSignal",),
    ".tools": ("Decision", "Tool", "ToolCall", "ToolOutput", "tool"),
    ".usage": ("Limits", "Usage"),
}
_MODULES = ("secrets",)
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_HOME_OF) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if name in _MODULES:  # agentkernel.secrets.add(...) without importing the module first
        return importlib.import_module(f".{name}", __name__)
    if module is None:
        raise AttributeError(f"module 'agentkernel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME_OF})


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the built front-end extension is (``jupyter labextension develop --overwrite .`` links it)."""
    return [{"src": "labextension", "dest": "agentkernel"}]


def load_ipython_extension(ipython):  # noqa: ANN001 - IPython's own signature
    """Register ``%%agent`` (called by ``%load_ext agentkernel``); the Jupyter part is imported only here."""
    from .jupyter import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython):  # noqa: ANN001
    from .jupyter import unload_ipython_extension as unload

    unload(ipython)
