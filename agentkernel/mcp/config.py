"""MCP server configuration in the ``mcpServers`` shape of Claude Desktop, Cursor and Claude Code's ``.mcp.json``::

    {"mcpServers": {
        "git":  {"command": "mcp-server-git", "args": ["--repository", "."], "env": {"GIT_PAGER": "cat"}},
        "time": {"command": "mcp-server-time", "trustAnnotations": true},
        "docs": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ..."}}
    }}

An entry with ``command`` is a stdio server, one with ``url`` a streamable-HTTP server. Keys agentkernel adds:
``trustAnnotations`` (run tools annotated ``readOnlyHint: true`` without asking), ``timeout`` (seconds per call,
60), ``startupTimeout`` (seconds for the server to start and answer its handshake, 30). Keys other tools add
(``disabled``, ``autoApprove``, ...) are ignored. Nothing here needs the ``mcp`` package.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import AgentConfigError
from ..secrets import is_secret_name

CONFIG_ENV = "AGENTKERNEL_MCP_CONFIG"
CONFIG_FILE = ".mcp.json"
CALL_TIMEOUT = 60.0
STARTUP_TIMEOUT = 30.0


class ServerEntry(BaseModel):
    """One server of the ``mcpServers`` table: a command to run (stdio) or a URL (streamable HTTP)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    type: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = None
    command: str | None = Field(default=None, min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    trust_annotations: bool = Field(default=False, alias="trustAnnotations")
    timeout: float = Field(default=CALL_TIMEOUT, gt=0)
    startup_timeout: float = Field(default=STARTUP_TIMEOUT, gt=0, alias="startupTimeout")

    @model_validator(mode="after")
    def _one_transport(self) -> ServerEntry:
        if (self.command is None) == (self.url is None):
            raise ValueError('give either "command" (a stdio server) or "url" (a streamable-HTTP server)')
        if self.type == "stdio" and self.url is not None or self.type not in (None, "stdio") and self.command:
            raise ValueError(f'"type": "{self.type}" does not fit an entry with '
                             f'"{"url" if self.url else "command"}"')
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable HTTP"

    def secrets(self, server: str) -> dict[str, str]:
        """The keys this entry (of server ``server``) holds, by name: every header value (a ``Bearer`` token without
        its scheme) and the environment values whose names mark them as secrets (see
        :func:`agentkernel.secrets.is_secret_name`)."""
        found: dict[str, str] = {}
        for header, value in self.headers.items():
            scheme, _, token = value.partition(" ")
            found[f"{server}.{header}"] = token if token and scheme.lower() in ("bearer", "basic", "token") else value
        found.update({name: value for name, value in self.env.items() if is_secret_name(name)})
        return found

    def describe(self) -> str:
        """How the server is reached, without header values or environment values (they may hold secrets)."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        assert self.url is not None
        return self.url


@dataclass(frozen=True)
class MCPConfig:
    """The servers of one configuration file (``path`` None for one given as a dict)."""

    servers: dict[str, ServerEntry]
    path: Path | None = None

    @property
    def source(self) -> str:
        return str(self.path) if self.path is not None else "the MCP configuration"

    def secrets(self) -> dict[str, str]:
        """The keys the entries hold, by name: every header value (a ``Bearer`` token without its scheme) and the
        environment values whose names mark them as secrets (see :func:`agentkernel.secrets.is_secret_name`)."""
        return {name: value for server, entry in self.servers.items() for name, value in entry.secrets(server).items()}

    def entry(self, name: str) -> ServerEntry:
        """The entry of server ``name``; AgentConfigError naming the file and the servers it has."""
        if name not in self.servers:
            known = ", ".join(self.servers) or "none"
            raise AgentConfigError(f"{self.source} has no MCP server {name!r} (its servers: {known})")
        return self.servers[name]


def parse_config(data: Any, path: Path | None = None) -> MCPConfig:
    """An :class:`MCPConfig` from the file's JSON value; AgentConfigError naming the file and the entry."""
    where = str(path) if path is not None else "the MCP configuration"
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise AgentConfigError(f'{where}: expected an object with "mcpServers": {{"NAME": {{"command": ...}}}}')
    servers: dict[str, ServerEntry] = {}
    for name, raw in data["mcpServers"].items():
        if not name.strip():
            raise AgentConfigError(f"{where}: a server name is empty")
        try:
            servers[name] = ServerEntry.model_validate(raw)
        except ValidationError as e:
            raise AgentConfigError(f"{where}: server {name!r}: {_problems(e)}") from None
    return MCPConfig(servers, path)


def load_config(path: str | os.PathLike[str] | None = None, *, cwd: str | os.PathLike[str] | None = None) -> MCPConfig:
    """Read the configuration at ``path``, else at ``$AGENTKERNEL_MCP_CONFIG``, else ``.mcp.json`` in ``cwd`` (the
    working directory); AgentConfigError when it is missing or malformed, naming the file and the entry."""
    if not path:
        # Relative to the working directory, as the user would write it (and as a saved notebook may show it).
        path = os.environ.get(CONFIG_ENV) or (Path(cwd) / CONFIG_FILE if cwd else Path(CONFIG_FILE))
        if not os.environ.get(CONFIG_ENV) and not Path(path).is_file():
            folder = Path(path).parent.resolve()
            raise AgentConfigError(f"no MCP configuration: there is no {CONFIG_FILE} in {folder}; give "
                                   f"--mcp-config PATH, %config AgentMagics.mcp_config, or ${CONFIG_ENV}")
    file = Path(os.path.expanduser(path))
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AgentConfigError(f"there is no MCP configuration file {str(file)!r}") from None
    except (OSError, UnicodeError) as e:
        raise AgentConfigError(f"cannot read the MCP configuration {str(file)!r}: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise AgentConfigError(f"{file}: not valid JSON ({e})") from None
    return parse_config(data, file)


def _problems(error: ValidationError) -> str:
    parts = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(p) for p in problem["loc"])
        message = problem["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)
