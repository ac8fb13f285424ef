"""Provider strings: each resolves to its adapter, base URL and key variable, and a key reaches only its own
provider, checked on what a real loopback server received through the real SDKs; then ``%%agent -m provider:model``
in a real kernel."""

from __future__ import annotations

import asyncio

import pytest
from anthropic_server import messages_events, sent_key
from kernel_client import KernelSession, kernel_fixtures
from openai_server import Reply, ScriptedServer, chat_events, collect, responses_events, user_request

from agentkernel.models.anthropic_messages import AnthropicMessagesModel
from agentkernel.models.openai_chat import OpenAIChatModel
from agentkernel.models.openai_responses import OpenAIResponsesModel
from agentkernel.models.provider import LOCAL_PLACEHOLDER_KEY
from agentkernel.models.providers import PROVIDERS, resolve

KEYS = {"OPENAI_API_KEY": "sk-openai-0123456789", "ANTHROPIC_API_KEY": "sk-ant-0123456789",
        "GEMINI_API_KEY": "gemini-0123456789", "OPENROUTER_API_KEY": "sk-or-0123456789"}
"""A distinct key per provider, all set at once: a test fails if one turns up where it does not belong."""


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


# -- in a kernel -------------------------------------------------------------------------------------------------

RESET = """\
%reset -f
%autoawait True
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTKERNEL_MODEL",
              "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "SERVER_KEY"):
    os.environ.pop(_name, None)
del _name
"""

session, kernel = kernel_fixtures("providers", RESET)


def test_the_magic_runs_an_anthropic_model_and_keeps_the_key_at_home(kernel: KernelSession):
    kernel.ok(f"os.environ['ANTHROPIC_API_KEY'] = {KEYS['ANTHROPIC_API_KEY']!r}")
    kernel.ok("os.environ['OPENAI_BASE_URL'] = 'http://127.0.0.1:9/v1'")  # for OpenAI only: not used here
    with ScriptedServer(Reply(messages_events(["Hi from Claude."]))) as server:
        cell = kernel.run(f"%%agent -m anthropic:claude-test --base-url {server.url}\nhello")
    assert cell.status == "ok", cell.describe()
    sent = server.requests[0]
    assert sent.path == "/v1/messages" and sent.body["model"] == "claude-test"
    assert sent_key(sent.headers) == LOCAL_PLACEHOLDER_KEY
    assert kernel.ok("print(_agent.answer)").stdout.strip() == "Hi from Claude."


def test_the_magic_names_the_missing_key_and_the_missing_url(kernel: KernelSession):
    cell = kernel.run("%%agent -m anthropic:claude-test\nhello")
    assert cell.status == "error" and "ANTHROPIC_API_KEY is not set" in cell.describe()
    cell = kernel.run("%%agent -m openai-compatible:qwen\nhello")
    assert cell.status == "error" and "needs --base-url" in cell.describe()


def test_the_help_lists_the_providers_and_their_keys(kernel: KernelSession):
    cell = kernel.run("%%agent?")
    (page,) = [p for p in cell.reply["content"]["payload"] if p.get("source") == "page"]
    flat = " ".join(page["data"]["text/plain"].split())
    assert "PROVIDER:MODEL for another provider (" + ", ".join(PROVIDERS) + ";" in flat
    assert all(key in flat for key in KEYS)


def test_loading_the_extension_and_resolving_a_provider_import_no_sdk():
    import subprocess
    import sys

    code = ("import sys, agentkernel, agentkernel.jupyter.magics; from agentkernel.models.providers import resolve; "
            "resolve('anthropic:m'); resolve('gemini:m'); print(sorted({'openai', 'anthropic'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
