"""Provider strings: each resolves to its adapter, base URL and key variable, and a key reaches only its own
provider, checked on what a real loopback server received through the real SDKs (``%%agent -m provider:model`` in
a real kernel: ``tests/kernel/test_providers_kernel.py``)."""

from __future__ import annotations

import asyncio

import pytest
from anthropic_server import messages_events, sent_key
from openai_server import Reply, ScriptedServer, chat_events, collect, responses_events, user_request
from provider_keys import KEYS

from agentkernel.models.anthropic_messages import AnthropicMessagesModel
from agentkernel.models.openai_chat import OpenAIChatModel
from agentkernel.models.openai_responses import OpenAIResponsesModel
from agentkernel.models.provider import LOCAL_PLACEHOLDER_KEY
from agentkernel.models.providers import PROVIDERS, resolve


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return KEYS


@pytest.mark.parametrize(("spec", "api", "cls", "url", "key"), [
    ("gpt-4.1-mini", "responses", OpenAIResponsesModel, "https://api.openai.com/v1", "OPENAI_API_KEY"),
    ("openai:gpt-4.1-mini", "responses", OpenAIResponsesModel, "https://api.openai.com/v1", "OPENAI_API_KEY"),
    ("anthropic:claude-sonnet-4-5", "anthropic", AnthropicMessagesModel, "https://api.anthropic.com",
     "ANTHROPIC_API_KEY"),
    ("gemini:gemini-2.5-flash", "chat", OpenAIChatModel,
     "https://generativelanguage.googleapis.com/v1beta/openai", "GEMINI_API_KEY"),
    ("ollama:qwen3:8b", "chat", OpenAIChatModel, "http://localhost:11434/v1", None),
    ("openrouter:anthropic/claude-3.5-haiku", "chat", OpenAIChatModel, "https://openrouter.ai/api/v1",
     "OPENROUTER_API_KEY"),
])
def test_each_provider_string_resolves_to_its_adapter_url_and_key(keys, spec, api, cls, url, key):
    resolved = resolve(spec)
    assert resolved.api == api and resolved.provider.key_env == key
    model = resolved.model_object()
    assert type(model) is cls
    assert model.base_url == url
    prefix, _, rest = spec.partition(":")
    assert model.name == (rest if prefix in PROVIDERS else spec)
    expected = keys[key] if key else LOCAL_PLACEHOLDER_KEY
    assert model._key() == expected


def test_plain_names_keep_their_meaning():
    assert resolve("gpt-4.1", api="chat").api == "chat"
    assert resolve("qwen3:8b").model == "qwen3:8b" and resolve("qwen3:8b").provider.name == "openai"
    assert resolve("openai:gpt-4.1", api="chat").api == "chat"
    assert resolve("gemini:x", api="responses").api == "chat"  # the other providers have one adapter each


def test_bad_provider_strings_say_what_is_missing():
    with pytest.raises(ValueError, match="needs --base-url"):
        resolve("openai-compatible:qwen")
    with pytest.raises(ValueError, match="no model"):
        resolve("anthropic:")
    assert resolve("openai-compatible:qwen", base_url="http://h/v1").base_url == "http://h/v1"


def test_anthropic_base_url_is_the_server_root():
    assert resolve("anthropic:c", base_url="http://127.0.0.1:8080/v1/").base_url == "http://127.0.0.1:8080"
    assert resolve("anthropic:c", base_url="http://127.0.0.1:8080").base_url == "http://127.0.0.1:8080"


def _first_request(spec: str, url: str, **options) -> dict[str, str]:
    resolved = resolve(spec, base_url=url)
    events = messages_events(["ok"]) if resolved.api == "anthropic" else (
        chat_events(["ok"]) if resolved.api == "chat" else responses_events(["ok"]))
    with ScriptedServer(Reply(events)) as server:
        asyncio.run(collect(resolve(spec, base_url=server.url).model_object(**options), user_request()))
    return server.requests[0].headers


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_no_key_reaches_a_base_url_written_in_the_notebook(keys, name):
    headers = _first_request(f"{name}:m", "http://x/v1")
    assert sent_key(headers) == LOCAL_PLACEHOLDER_KEY
    assert not any(key in value for value in headers.values() for key in keys.values())


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_api_key_env_sends_the_named_key_and_only_that_one(keys, monkeypatch, name):
    monkeypatch.setenv("SERVER_KEY", "server-key-0123456789")
    headers = _first_request(f"{name}:m", "http://x/v1", api_key_env="SERVER_KEY")
    assert sent_key(headers) == "server-key-0123456789"
    assert not any(key in value for value in headers.values() for key in keys.values())


@pytest.mark.parametrize(("spec", "url_env", "key_env"), [("openai:m", "OPENAI_BASE_URL", "OPENAI_API_KEY"),
                                                          ("m", "OPENAI_BASE_URL", "OPENAI_API_KEY"),
                                                          ("anthropic:m", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")])
def test_the_environment_url_gets_its_own_providers_key_and_no_other(keys, monkeypatch, spec, url_env, key_env):
    resolved = resolve(spec)
    events = messages_events(["ok"]) if resolved.api == "anthropic" else responses_events(["ok"])
    with ScriptedServer(Reply(events)) as server:
        monkeypatch.setenv(url_env, server.url.removesuffix("/v1") if resolved.api == "anthropic" else server.url)
        asyncio.run(collect(resolved.model_object(), user_request()))
    headers = server.requests[0].headers
    assert sent_key(headers) == keys[key_env]
    others = [value for name, value in keys.items() if name != key_env]
    assert not any(key in value for value in headers.values() for key in others)


def test_anthropic_custom_headers_go_only_where_the_key_may_go(keys, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Gateway-Token: gateway-0123456789\nX-Team: blue")
    headers = _first_request("anthropic:m", "http://x/v1")
    assert "x-gateway-token" not in headers and "x-team" not in headers
    with ScriptedServer(Reply(messages_events(["ok"]))) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url.removesuffix("/v1"))
        asyncio.run(collect(resolve("anthropic:m").model_object(), user_request()))
    assert server.requests[0].headers["x-gateway-token"] == "gateway-0123456789"


def test_a_missing_key_for_the_providers_own_url_is_a_clear_error(monkeypatch):
    from agentkernel.models import ModelError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(ModelError, match="no API key: set ANTHROPIC_API_KEY"):
        asyncio.run(collect(resolve("anthropic:m").model_object(), user_request()))
    assert "ANTHROPIC_API_KEY is not set" in (resolve("anthropic:m").key_problem(None) or "")
    assert resolve("anthropic:m", base_url="http://127.0.0.1:1").key_problem(None) is None
