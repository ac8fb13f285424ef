"""``%%agent``'s model options in a real kernel, against the loopback server in this process: the output cap and
temperature sent, which key reaches which server, --record afresh and not with --replay, and the Truncated cell.

One kernel serves the module; each test resets its namespace and the agent environment variables.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernel_client import KernelSession, kernel_fixtures
from openai_server import TEST_KEY, Reply, ScriptedServer, chat_events, responses_events

RESET = """\
%reset -f
%autoawait True
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTKERNEL_MODEL",
              "SERVER_KEY"):
    os.environ.pop(_name, None)
del _name
"""


session, kernel = kernel_fixtures("magic_models", RESET)


def notebook_text(cell) -> str:
    """Everything the cell put into the notebook (outputs and errors), as one text."""
    return json.dumps([m["content"] for m in cell.messages], ensure_ascii=False)


def test_output_cap_and_temperature_reach_the_server(kernel: KernelSession):
    with ScriptedServer(Reply(chat_events(["ok"])), Reply(responses_events(["ok"]))) as server:
        cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m small --max-output-tokens 50 "
                          "--temperature 0.2\nhello")
        assert cell.status == "ok", cell.describe()
        kernel.ok("%config AgentMagics.max_output_tokens = 7")
        kernel.ok("%config AgentMagics.temperature = 0.0")
        try:
            cell = kernel.run(f"%%agent --base-url {server.url} -m small\nhello")
            assert cell.status == "ok", cell.describe()
        finally:
            kernel.ok("%config AgentMagics.max_output_tokens = 0")
            kernel.ok("%config AgentMagics.temperature = None")
    chat, responses = (r.body for r in server.requests)
    assert (chat["max_tokens"], chat["temperature"]) == (50, 0.2)
    assert (responses["max_output_tokens"], responses["temperature"]) == (7, 0.0)


def test_the_environment_key_does_not_go_to_a_base_url_written_in_the_notebook(kernel: KernelSession):
    kernel.ok(f"os.environ['OPENAI_API_KEY'] = {TEST_KEY!r}")
    with ScriptedServer(Reply(chat_events(["ok"]))) as server:
        cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m small\nhello")
    assert cell.status == "ok", cell.describe()
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"


def test_api_key_env_sends_the_named_variable_and_the_notebook_never_holds_it(kernel: KernelSession):
    kernel.ok(f"os.environ['OPENAI_API_KEY'] = {TEST_KEY!r}; os.environ['SERVER_KEY'] = 'sk-server-0123456789'")
    with ScriptedServer(Reply(chat_events(["ok"])), Reply(status=401, body={"error": {"message": "wrong key"}})) \
            as server:
        cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m small --api-key-env SERVER_KEY\nhello")
        assert cell.status == "ok", cell.describe()
        refused = kernel.run(f"%%agent --api chat --base-url {server.url} -m small --api-key-env SERVER_KEY\nhi")
    assert server.requests[0].headers["authorization"] == "Bearer sk-server-0123456789"
    assert [e["ename"] for e in refused.errors] == ["FatalError"] and "401" in refused.errors[0]["evalue"]
    for shown in (notebook_text(cell), notebook_text(refused)):
        assert "sk-server-0123456789" not in shown and TEST_KEY not in shown


def test_a_truncated_response_ends_the_cell_with_truncated(kernel: KernelSession):
    kernel.ok("from agentkernel import ScriptedModel, Turn\n"
              "cut = ScriptedModel([Turn(text='The answer is', truncated='length')])")
    cell = kernel.run("%%agent -m cut\nhello")
    (error,) = cell.errors
    assert error["ename"] == "Truncated"
    assert error["evalue"].startswith("TRUNCATED: the server cut the model's response short (length)")
    assert kernel.value("_agent.status") == "truncated" and kernel.value("_agent.answer") == "The answer is"


def test_record_starts_the_cassette_afresh_and_record_with_replay_is_a_usage_error(kernel: KernelSession,
                                                                                    tmp_path: Path):
    cassette = tmp_path / "run.jsonl"
    kernel.ok("from agentkernel import ScriptedModel\none = ScriptedModel(['first']); two = ScriptedModel(['second'])")
    assert kernel.run(f"%%agent -m one --record {cassette}\nhello").status == "ok"
    assert kernel.run(f"%%agent -m two --record {cassette}\nhello").status == "ok"
    assert [json.loads(line)["events"][0]["text"] for line in cassette.read_text().splitlines()] == ["second"]

    cell = kernel.run(f"%%agent --replay {cassette} --record {tmp_path / 'other.jsonl'}\nhello")
    assert cell.status == "error"
    shown = cell.stderr + "".join(e["evalue"] for e in cell.errors)
    assert "UsageError" in shown and "--record and --replay" in shown, cell.describe()
    assert not (tmp_path / "other.jsonl").exists() and not cell.displays


def test_api_key_env_naming_an_unset_variable_is_a_config_error_before_the_run(kernel: KernelSession):
    cell = kernel.run("%%agent --api chat --base-url http://127.0.0.1:9/v1 -m small --api-key-env SERVER_KEY\nhi")
    (error,) = cell.errors
    assert error["ename"] == "AgentConfigError" and "SERVER_KEY, which is not set" in error["evalue"]
    assert not cell.displays and kernel.value("'_agent' in globals()") is False
