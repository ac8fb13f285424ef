"""Fault injection for secrets, which stay in the kernel, in a real kernel against a fake OpenAI server.

A kernel holds secrets of every kind the set takes: secret-named environment variables (``GITHUB_TOKEN``,
``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``, ``SLACK_BOT_TOKEN``), a URL password (``DATABASE_URL``), a notebook variable
named by ``%agent_secret`` and a value given to ``agentkernel.secrets.add``. One ``%%agent`` run takes every road a
secret could leave by: ``{token}`` in the prompt, ``run_python`` stdout, stderr, display and value (as written,
URL-encoded and in a Basic-auth header), a traceback, ``inspect_variable``, ``list_variables``, ``read_notebook``,
``last_error``, an ``@tool`` function, ``read_file``, ``search_text``, and the cassette and transcript it writes.
No value reaches a request body, an iopub message, a file or ``_agent``; the marker does, where the value would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_client import KernelSession, kernel_env
from openai_server import TEST_KEY, Reply, ScriptedServer, responses_events

from agentkernel.briefing import DEFAULT_SYSTEM_PROMPT
from agentkernel.secrets import SECRETS_FRAME

GH = "ghp_GitHubTokenValue0123456789abcdefXYZ"
AWS = "AwsSecretAccessKey/0123456789+abcdefghij"
HF = "hf_HuggingFaceTokenValue0123456789"
SLACK = "xoxb-SlackBotTokenValue-0123456789"
DB_PASSWORD = "pg-pass/word@123456"
NOTEBOOK = "correct-horse-battery-staple"
VAULT = "vault-value-0123456789-abcdef"
PLAIN = "plain-setting-named-by-secret-env"
VALUES = {"GITHUB_TOKEN": GH, "AWS_SECRET_ACCESS_KEY": AWS, "HF_TOKEN": HF, "SLACK_BOT_TOKEN": SLACK,
          "DATABASE_URL": DB_PASSWORD, "db_password": NOTEBOOK, "vault": VAULT, "PLAIN_SETTING": PLAIN}

SETUP = f"""\
import os
from urllib.parse import quote
os.environ.update(GITHUB_TOKEN={GH!r}, AWS_SECRET_ACCESS_KEY={AWS!r}, HF_TOKEN={HF!r}, SLACK_BOT_TOKEN={SLACK!r},
                  DATABASE_URL="postgres://me:" + quote({DB_PASSWORD!r}, safe="") + "@db.example/app",
                  PLAIN_SETTING={PLAIN!r}, GOOGLE_APPLICATION_CREDENTIALS=os.path.abspath("config.txt"),
                  OPENAI_API_KEY={TEST_KEY!r})
token = os.environ["GITHUB_TOKEN"]
db_password = {NOTEBOOK!r}
vault_value = {VAULT!r}
import agentkernel
from agentkernel import tool
agentkernel.secrets.add(vault_value, name="vault")

@tool
def leak() -> str:
    "Return a credential (a careless tool)."
    return "slack " + os.environ["SLACK_BOT_TOKEN"]
"""

RUN_CODE = """\
import base64, sys, urllib.parse
from IPython.display import Markdown, display
seen = os.environ["GITHUB_TOKEN"]
print("token", seen)
print("basic", base64.b64encode(f"me:{seen}".encode()).decode())
password = urllib.parse.unquote(urllib.parse.urlsplit(os.environ["DATABASE_URL"]).password)
print("plain", password, "quoted", urllib.parse.quote(password, safe=""))
print("aws", os.environ["AWS_SECRET_ACCESS_KEY"], file=sys.stderr)
print("plain", os.environ["PLAIN_SETTING"])
print("credentials file", os.environ["GOOGLE_APPLICATION_CREDENTIALS"])
display(Markdown(f"**{db_password}**"))
os.environ["HF_TOKEN"]"""

CALLS = [
    ("c1", "run_python", {"code": RUN_CODE}),
    ("c2", "run_python", {"code": "raise RuntimeError(f'refused {vault_value}')"}),
    ("c3", "inspect_variable", {"name": "db_password"}),
    ("c4", "list_variables", {}),
    ("c5", "read_notebook", {"count": 50}),
    ("c6", "last_error", {}),
    ("c7", "leak", {}),
    ("c8", "read_file", {"path": "config.txt"}),
    ("c9", "read_file", {"path": ".env"}),
    ("c10", "list_dir", {}),
    ("c11", "search_text", {"pattern": "TOKEN"}),
]
FILES = {"config.txt": f"GITHUB_TOKEN={GH}\n", ".env": f"GITHUB_TOKEN={GH}\nHF_TOKEN={HF}\n"}
"""The files the test itself writes holding values (the notebook's own; the agent's tools must not pass them on)."""


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory, server: ScriptedServer) -> Iterator[KernelSession]:
    root = tmp_path_factory.mktemp("secrets_kernel")
    (root / "cwd").mkdir()
    for name, text in FILES.items():
        (root / "cwd" / name).write_text(text)
    ks = KernelSession(root / "cwd", kernel_env(root))
    try:
        ks.ok("%load_ext agentkernel")
        ks.ok(SETUP + f"os.environ['OPENAI_BASE_URL'] = {server.url!r}")
        yield ks
    finally:
        ks.shutdown()


def calls_reply(*calls: tuple[str, str, dict[str, object]]) -> Reply:
    return Reply(responses_events([], [(i, n, json.dumps(a)) for i, n, a in calls]))


def leaks(text: str) -> list[str]:
    """The names of the secrets whose values ``text`` holds."""
    return [name for name, value in VALUES.items() if value in text]


def outputs(kernel: KernelSession) -> dict[str, str]:
    items = kernel.value("[i for i in _agent.history if i.get('type') == 'function_call_output']")
    return {item["call_id"]: item["output"] for item in items}


def files_under(*folders: Path) -> dict[str, str]:
    return {str(p): p.read_text(errors="replace") for folder in folders for p in folder.rglob("*")
            if p.is_file() and p.name not in FILES}


def test_naming_secrets_and_listing_them_never_shows_a_value(kernel: KernelSession):
    named = kernel.ok("%agent_secret db_password")
    assert "db_password is kept secret: the model sees [secret $db_password]" in named.stdout
    kernel.ok("short_one = 'abc'")
    assert "shorter than 8 characters" in kernel.ok("%agent_secret short_one").stdout
    assert "no environment variable or notebook variable" in kernel.run("%agent_secret nothing_here").describe()
    kernel.ok("%config AgentMagics.secret_env = ['PLAIN_SETTING', 'UNSET_SETTING']")
    listing = kernel.ok("%agent_secret").stdout
    assert "secret_env names UNSET_SETTING, which is not set: it is not treated as a secret" in listing
    for name in VALUES:
        assert name in listing, listing
    assert not leaks(listing) and "short_one" not in listing, listing


def test_no_road_out_carries_a_value_and_each_carries_its_marker(kernel: KernelSession, server: ScriptedServer):
    kernel.ok("%agent_secret db_password")
    kernel.ok("%config AgentMagics.secret_env = ['PLAIN_SETTING']")
    kernel.run("raise ValueError(f\"bad key {os.environ['HF_TOKEN']}\")")  # for last_error
    server.add(calls_reply(*CALLS), Reply(responses_events(["done"])))
    cell = kernel.run("%%agent --allow-writes --tools run_python,inspect_variable,list_variables,read_notebook,"
                      "last_error,leak,read_file,list_dir,search_text --record run.jsonl\n"
                      "Check the token {token} works.", timeout=90)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.status") == "complete"

    # The code ran with the real values, by name.
    assert kernel.value("seen == os.environ['GITHUB_TOKEN'] == token")
    # The model: neither request holds a value; the markers stand where the values would.
    first, second = (json.dumps(r.body) for r in server.requests[-2:])
    assert not leaks(first + second), leaks(first + second)
    assert "Check the token [secret $GITHUB_TOKEN] works." in first
    assert "the prompt holds the secret $GITHUB_TOKEN" in cell.stdout and GH not in cell.stdout
    out = outputs(kernel)
    assert "token [secret $GITHUB_TOKEN]" in out["c1"]
    assert "basic bWU6[secret $GITHUB_TOKEN]" in out["c1"]  # base64 of "me:<token>": "me:" is bWU6
    assert "plain [secret $DATABASE_URL] quoted [secret $DATABASE_URL]" in out["c1"]
    assert "aws [secret $AWS_SECRET_ACCESS_KEY]" in out["c1"] and "[secret $HF_TOKEN]" in out["c1"]
    assert "plain [secret $PLAIN_SETTING]" in out["c1"]  # named by %config AgentMagics.secret_env
    assert "credentials file /" in out["c1"]  # the path of an existing file is no secret, whatever its name
    assert "refused [secret $vault]" in out["c2"]
    assert "[secret $db_password]" in out["c3"] and "[secret $GITHUB_TOKEN]" in out["c4"]
    assert "[secret $AWS_SECRET_ACCESS_KEY]" in out["c5"] and "bad key [secret $HF_TOKEN]" in out["c6"]
    assert out["c7"] == "slack [secret $SLACK_BOT_TOKEN]"
    assert out["c8"] == "GITHUB_TOKEN=[secret $GITHUB_TOKEN]"
    assert "read_file: .env holds secrets and is not read; the model may use its variables by name" in out["c9"]
    assert ".env" in out["c10"].splitlines() and "config.txt" in out["c10"].splitlines()
    assert "config.txt:1: GITHUB_TOKEN=[secret $GITHUB_TOKEN]" in out["c11"] and "not searched: 1 files" in out["c11"]
    # What the model is told: only once it has been shown a marker, so a run without secrets sends its prompt as is.
    assert server.requests[-2].body["instructions"] == DEFAULT_SYSTEM_PROMPT + "\n\n" + SECRETS_FRAME
    # The notebook: no iopub message of the run (panel, displays, static rendering) holds a value.
    shown = json.dumps([m["content"] for m in cell.messages])
    assert not leaks(shown) and "[secret $GITHUB_TOKEN]" in shown
    # _agent and its history.
    agent = kernel.value("repr(vars(_agent))")
    assert not leaks(agent) and "[secret $vault]" in agent
    # Files: the cassette, the transcript, anything else under the working directory or the transcripts folder.
    written = files_under(kernel.cwd, kernel.cwd.parent / "transcripts")
    assert any(p.endswith("run.jsonl") for p in written) and any("transcripts" in p for p in written), written
    assert {p: leaks(text) for p, text in written.items() if leaks(text)} == {}
    assert "[secret $GITHUB_TOKEN]" in written[str(kernel.cwd / "run.jsonl")]


def test_a_cassette_replays_in_a_kernel_holding_other_values(kernel: KernelSession, server: ScriptedServer):
    code = "print(os.environ['GITHUB_TOKEN'], os.environ['HF_TOKEN'])"
    server.add(calls_reply(("r1", "run_python", {"code": code}), ("r2", "leak", {})), Reply(responses_events(["ok"])))
    cell = kernel.run("%%agent --allow-writes --tools run_python,leak --record replay.jsonl\nuse {token}", timeout=60)
    assert cell.status == "ok" and kernel.value("_agent.status") == "complete", cell.describe()
    recorded = (kernel.cwd / "replay.jsonl").read_text()
    assert not leaks(recorded) and "[secret $GITHUB_TOKEN] [secret $HF_TOKEN]" in recorded
    kernel.ok("os.environ.update(GITHUB_TOKEN='ghp_another-value-entirely-0000', HF_TOKEN='hf_another-one-11111',"
              " SLACK_BOT_TOKEN='xoxb-another-slack-token-2222'); token = os.environ['GITHUB_TOKEN']")
    try:
        replayed = kernel.run("%%agent --allow-writes --tools run_python,leak --replay replay.jsonl\nuse {token}",
                              timeout=60)
        assert replayed.status == "ok", replayed.describe()
        assert kernel.value("_agent.status") == "complete", kernel.value("_agent.detail")
        assert "another" not in json.dumps([m["content"] for m in replayed.messages])
    finally:
        kernel.ok(SETUP)


def test_allow_secret_files_reads_them_still_redacted(kernel: KernelSession, server: ScriptedServer):
    server.add(calls_reply(("f1", "read_file", {"path": ".env"}), ("f2", "search_text", {"pattern": "HF_"})),
               Reply(responses_events(["ok"])))
    cell = kernel.run("%%agent --tools read_file,search_text --allow-secret-files\nread .env", timeout=60)
    assert cell.status == "ok" and kernel.value("_agent.status") == "complete", cell.describe()
    out = outputs(kernel)
    assert out["f1"] == "GITHUB_TOKEN=[secret $GITHUB_TOKEN]\nHF_TOKEN=[secret $HF_TOKEN]"
    assert ".env:2: HF_TOKEN=[secret $HF_TOKEN]" in out["f2"]
    assert not leaks(json.dumps(server.requests[-2].body))
