"""One provider (:class:`Provider`): the API its adapter speaks, its base URL, and which key may go to which URL;
the placeholder key sent where none may go; comparing URLs. Below both the adapters, which read it, and the table
of providers by prefix (:mod:`agentkernel.models.providers`), which picks an adapter, so neither imports the other's
module to reach it.

A key is sent only to its own provider: the provider's key variable (``ANTHROPIC_API_KEY``, ...) goes to that
provider's own URL, or to the URL its URL variable (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``) names, since the
environment, not a notebook, chose that one. Any other base URL (one written into a shared notebook) gets no key
unless ``api_key_env`` names the variable that holds its key. Nothing here imports an SDK.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from .base import ModelError

Api = Literal["responses", "chat", "anthropic"]

LOCAL_PLACEHOLDER_KEY = "not-needed"
"""Sent to a base URL that gets no key: the SDKs must send some key, and local servers (vLLM, Ollama, llama.cpp)
ignore it."""


@dataclass(frozen=True)
class Provider:
    """One provider: the API its adapter speaks, its base URL, and the environment variables of its key and URL."""

    name: str
    title: str
    """Its name in messages (``OpenAI``, ``Anthropic``)."""
    api: Api
    """The adapter: OpenAI ``responses`` (``openai:`` follows ``--api``), ``chat`` Completions, or ``anthropic``
    Messages."""
    url: str | None
    """Its own base URL; None: there is none, ``base_url`` must be given (``openai-compatible:``)."""
    key_env: str | None = None
    """The variable holding its key; None: it takes no key (a local server) unless ``api_key_env`` names one."""
    url_env: str | None = None
    """The variable that may name another URL for it (which then gets the key too)."""
    prices: str | None = None
    """Its provider id in genai-prices' data, whose prices apply at its own URL (see :mod:`agentkernel.pricing`)."""

    def default_url(self) -> str | None:
        """The URL used when none is given: the environment's (``url_env``), else the provider's own."""
        return (os.environ.get(self.url_env) if self.url_env else None) or self.url

    def key_may_go_to(self, base_url: str | None) -> bool:
        """Whether this provider's key (``key_env``) may be sent to ``base_url`` (``None``: the default URL)."""
        if base_url is None:
            return True
        return same_url(base_url, self.url or "") or same_url(
            base_url, os.environ.get(self.url_env) or "" if self.url_env else "")

    def key(self, base_url: str | None, *, api_key: str | None = None, api_key_env: str | None = None) -> str:
        """The key to send to ``base_url`` (``None``: the default URL), by the rules in the module's docs: ``api_key``
        if given, else the variable ``api_key_env`` names, else ``key_env``'s where it may go, else the placeholder.

        Raises :class:`ModelError` when ``api_key_env`` is not set, or the provider's own URL would get no key.
        """
        if api_key:
            return api_key
        if api_key_env:
            named = os.environ.get(api_key_env)
            if not named:
                raise ModelError(f"the environment variable {api_key_env} (named by api_key_env) is not set")
            return named
        own = os.environ.get(self.key_env) if self.key_env else None
        if own and self.key_may_go_to(base_url):
            return own
        if self.key_env and same_url(base_url or self.default_url() or "", self.url or ""):
            raise ModelError(f"no API key: set {self.key_env} (or pass api_key=...), or give a base URL for a local "
                             f"{self.title}-compatible server that needs no key")
        return LOCAL_PLACEHOLDER_KEY

    def describe_key(self) -> str:
        """Which key goes where, for an error message about a refused or missing key."""
        if not self.key_env:
            return "this provider takes no key unless --api-key-env (api_key_env=...) names the variable holding one"
        where = f"the {self.title} API" + (f" or to ${self.url_env}" if self.url_env else "")
        return f"{self.key_env} goes only to {where}"


OPENAI = Provider("openai", "OpenAI", "responses", "https://api.openai.com/v1", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                  prices="openai")
ANTHROPIC = Provider("anthropic", "Anthropic", "anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY",
                     "ANTHROPIC_BASE_URL", prices="anthropic")


def anthropic_root(url: str) -> str:
    """The server root the anthropic SDK takes (it adds ``/v1/messages``): a trailing ``/v1`` is dropped."""
    return url.rstrip("/").removesuffix("/v1")


def same_url(a: str, b: str) -> bool:
    """Whether two URLs name the same place (scheme and host case aside, trailing slashes aside)."""
    if not a or not b:
        return False
    x, y = urlsplit(a.strip()), urlsplit(b.strip())
    return (x.scheme.lower(), x.netloc.lower(), x.path.rstrip("/")) == (y.scheme.lower(), y.netloc.lower(),
                                                                        y.path.rstrip("/"))
