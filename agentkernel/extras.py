"""The SDKs imported on first use, and the one line that says how to install one that is missing.

``openai`` and ``genai-prices`` are dependencies (a trimmed environment may still lack them); ``anthropic`` and
``mcp`` come with extras. Each is imported where it is first needed, inside :func:`needs`, so that a missing one
ends the cell with one :class:`~agentkernel.errors.AgentConfigError` line naming the ``pip install`` command, not a
``ModuleNotFoundError`` traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .distribution import DISTRIBUTION
from .errors import AgentConfigError

SDKS: dict[str, tuple[str, str]] = {
    "openai": ("OpenAI and OpenAI-compatible models need the openai package", "pip install openai"),
    "anthropic": ("anthropic: models need the anthropic package", f"pip install '{DISTRIBUTION}[anthropic]'"),
    "mcp": ("MCP servers need the mcp package", f"pip install '{DISTRIBUTION}[mcp]'"),
    "genai_prices": ("a price from genai-prices' data needs the genai-prices package", "pip install genai-prices"),
    "opentelemetry": ("traces need the OpenTelemetry SDK (opentelemetry-sdk) and its OTLP exporter",
                      f"pip install '{DISTRIBUTION}[otel]'"),
}
"""By the module's import name: what needs it, and the command that installs it."""


def missing(module: str) -> str:
    """The one line for a missing SDK, e.g. ``MCP servers need the mcp package, which is not installed: pip install
    'jupyter-agentkernel[mcp]'``."""
    needed, command = SDKS[module]
    return f"{needed}, which is not installed: {command}"


@contextlib.contextmanager
def needs(module: str) -> Iterator[None]:
    """Raise :func:`missing`'s line as an :class:`AgentConfigError` when ``module`` (or a part of it) cannot be
    imported inside the block, with the import's own words when it names no module (a broken install); a module
    it imports that is missing (``name`` another package's) passes through."""
    try:
        yield
    except ImportError as e:
        if e.name is not None and e.name.split(".")[0] != module:
            raise
        raise AgentConfigError(missing(module) + ("" if e.name else f" ({e})")) from None
