"""agentkernel: a bounded agent loop that runs inline in a Jupyter kernel.

``%load_ext agentkernel`` registers the ``%%agent`` magic; the loop itself (:func:`run`) has no Jupyter in it.
"""

from .endings import STATUSES, Status
from .errors import AgentConfigError
from .guards import GuardConfig
from .history import HistoryError, repair_history, validate_history
from .loop import DEFAULT_SYSTEM_PROMPT, AgentLoop, run
from .models import (
    Call,
    Model,
    ModelError,
    ModelRequest,
    OpenAIChatModel,
    OpenAIResponsesModel,
    RecordingModel,
    ReplayModel,
    ScriptedModel,
    Turn,
)
from .result import LoopResult
from .stop import StopSignal
from .tools import Decision, Tool, ToolCall, ToolOutput, tool
from .transcript import load_transcript
from .usage import Limits, Usage

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SYSTEM_PROMPT", "STATUSES", "AgentConfigError", "AgentLoop", "Call", "Decision", "GuardConfig",
    "HistoryError", "Limits", "LoopResult", "Model", "ModelError", "ModelRequest", "OpenAIChatModel",
    "OpenAIResponsesModel", "RecordingModel", "ReplayModel", "ScriptedModel", "Status", "StopSignal", "Tool",
    "ToolCall", "ToolOutput", "Turn", "Usage",
    "load_transcript", "repair_history", "run", "tool", "validate_history",
]


def load_ipython_extension(ipython):  # noqa: ANN001 - IPython's own signature
    """Register ``%%agent`` (called by ``%load_ext agentkernel``); the Jupyter part is imported only here."""
    from .jupyter import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython):  # noqa: ANN001
    from .jupyter import unload_ipython_extension as unload

    unload(ipython)
