"""``%%agent -m provider:model`` in a real kernel: the key stays at home, a missing key or URL is named, the help
lists the providers, and loading the extension imports no SDK."""

from __future__ import annotations

from anthropic_server import messages_events, sent_key
from kernel_client import KernelSession, kernel_fixtures
from openai_server import Reply, ScriptedServer
from provider_keys import KEYS

from agentkernel.models.provider import LOCAL_PLACEHOLDER_KEY
from agentkernel.models.providers import PROVIDERS

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
