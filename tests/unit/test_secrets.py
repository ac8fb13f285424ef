"""The secret set: which names and values count, every form a value is redacted in, the kernel's set
kept current, and the core's roads (tool outputs, the system prompt, transcripts, cassettes, the file tools)."""

from __future__ import annotations

import asyncio
import base64
import html
import json
import socket
import string
import subprocess
import threading
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_servers import git_repository, need
from secret_pieces import PIECE, leaked

import agentkernel
from agentkernel import Call, RecordingModel, ReplayModel, ScriptedModel, run, tool
from agentkernel.briefing import DEFAULT_SYSTEM_PROMPT
from agentkernel.mcp import connect
from agentkernel.mcp.config import parse_config
from agentkernel.models.base import ModelRequest
from agentkernel.secrets import (
    KERNEL,
    MIN_SECRET_CHARS,
    PIECE_CHARS,
    SECRET_WORDS,
    SECRETS_FRAME,
    SecretSet,
    environment_secrets,
    is_secret_name,
    is_secret_value,
    redact_text,
    restore,
)
from agentkernel.tools import invoke
from agentkernel.tools.files import file_tools, is_secret_file

VALUE = "ghp_UnitTestTokenValue0123456789"

# -- which names count ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "PGPASSWORD", "API_KEY",
                                  "MY_APIKEY", "DB_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS", "SSH_PRIVATE_KEY_DATA",
                                  "SESSION_COOKIE", "github_token", "KEY", "AZURE_CREDENTIAL_X"])
def test_secret_names(name: str):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "JPY_SESSION_NAME", "XAUTHORITY", "PATH", "HOME", "SSH_AUTH_SOCK",
                                  "TOKENIZERS_PARALLELISM", "KEYBOARD_LAYOUT", "PRIVATELY_HELD", "LANG"])
def test_names_that_are_not_secret(name: str):
    assert not is_secret_name(name)


PARTS = st.text(alphabet="ABCDEFGHIJLMNOQRUVWXYZ0123456789", min_size=1, max_size=8)  # no K, P, S, T: no word


@given(st.lists(PARTS, max_size=3), st.sampled_from(SECRET_WORDS), st.lists(PARTS, max_size=3))
def test_any_name_with_a_secret_part_is_secret(before: list[str], word: str, after: list[str]):
    assert is_secret_name("_".join([*before, word, *after]))
    assert is_secret_name("".join(before) + word)  # a name ending in one (PGPASSWORD)


@given(st.lists(PARTS, min_size=1, max_size=4))
def test_a_name_without_a_secret_part_is_not(parts: list[str]):
    assert not is_secret_name("_".join(parts))


def test_which_values_count(tmp_path: Path):
    assert not is_secret_value("x" * (MIN_SECRET_CHARS - 1)) and is_secret_value("x" * MIN_SECRET_CHARS)
    (tmp_path / "key.json").write_text("{}")
    assert not is_secret_value(str(tmp_path / "key.json"))  # GOOGLE_APPLICATION_CREDENTIALS: a path, not a key
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "agent.sock"))
        assert not is_secret_value(str(tmp_path / "agent.sock"))  # SSH_AUTH_SOCK
    assert is_secret_value(str(tmp_path / "missing.key"))


def test_the_environment_s_secrets_by_name(tmp_path: Path):
    env = {"GITHUB_TOKEN": VALUE, "HF_TOKEN": "short", "SSH_AUTH_SOCK": str(tmp_path), "PATH": "/usr/bin:/bin",
           "DATABASE_URL": "postgres://me:" + quote("p@ss/word12", safe="") + "@db/app", "PLAIN": "not-named-1234",
           "PWD": "/home/someone/SECRET_KEY"}
    assert environment_secrets(env) == {"GITHUB_TOKEN": VALUE, "DATABASE_URL": "p@ss/word12"}
    assert environment_secrets(env, named=["PLAIN"])["PLAIN"] == "not-named-1234"


# -- the forms of a value, in one pass -----------------------------------------------------------------------


def secret_set(**secrets: str) -> SecretSet:
    return SecretSet(tuple(secrets.items()), 1)


@given(st.text(min_size=MIN_SECRET_CHARS, max_size=40), st.text(max_size=20), st.text(max_size=20))
def test_a_value_is_replaced_wherever_it_stands(value: str, before: str, after: str):
    redacted = secret_set(S=value).redact(before + value + after)
    assert "[secret $S]" in redacted
    assert value not in redacted or value in "[secret $S]"


SMALL = st.text(alphabet="abcd=/:_", max_size=12)  # few letters: values overlap, repeat and touch each other


@given(st.lists(st.text(alphabet="abcd=/:_", min_size=MIN_SECRET_CHARS, max_size=12), min_size=1, max_size=4),
       st.lists(st.tuples(SMALL, st.integers(0, 3)), max_size=6))
def test_no_value_is_left_whatever_overlaps(values: list[str], pieces: list[tuple[str, int]]):
    text = "".join(piece + values[i % len(values)] for piece, i in pieces)
    redacted = SecretSet(tuple((f"S{i}", v) for i, v in enumerate(values)), 1).redact(text)
    assert not [v for v in values if v in redacted], redacted


@given(st.binary(max_size=5), st.text(alphabet=st.characters(codec="utf-8"), min_size=MIN_SECRET_CHARS, max_size=40),
       st.binary(max_size=5))
def test_base64_of_a_value_is_replaced_at_every_alignment(before: bytes, value: str, after: bytes):
    encoded = base64.b64encode(before + value.encode() + after).decode()
    assert "[secret $S]" in secret_set(S=value).redact(encoded)


def test_every_form_of_a_value():
    value = "p@ss/w0rd:é'\"x"
    s = secret_set(DB=value)
    for form in (value, quote(value, safe=""), quote(value), json.dumps(value)[1:-1], repr(value)[1:-1],
                 json.dumps(value, ensure_ascii=False)[1:-1], html.escape(value),
                 base64.b64encode(f"user:{value}".encode()).decode(),
                 base64.urlsafe_b64encode(value.encode()).decode()):
        assert "[secret $DB]" in s.redact(f"<{form}>"), form


def test_the_longest_secret_wins_and_names_are_kept():
    s = secret_set(SHORT="abcdefgh", LONG="abcdefghijkl", KEYLIKE="sk-named-0123456789")
    assert s.redact("abcdefghijkl abcdefgh.") == "[secret $LONG] [secret $SHORT]."
    assert s.redact("sk-named-0123456789 sk-other-0123456789") == "[secret $KEYLIKE] [redacted]"
    assert s.redact("https://me:pw@host/x") == "https://host/x"
    assert s.redact("\udcff lone abcdefgh") == "\udcff lone [secret $SHORT]"  # lone surrogates survive
    assert s.redact("nothing here") == "nothing here"
    overlapping = secret_set(LEFT="abcdefgh", RIGHT="efghijklmn")
    assert overlapping.redact("<abcdefghijklmn>") == "<[secret $LEFT]>"  # no part of RIGHT is left


VALUE_CHARS = string.ascii_letters + string.digits + "+/=_-.:@~!%*,'\\\""
SECRET_VALUES = st.one_of(
    st.text(alphabet=VALUE_CHARS, min_size=PIECE, max_size=700),
    st.lists(st.text(alphabet=VALUE_CHARS, min_size=1, max_size=70), min_size=2, max_size=12)
    .map("\n".join).filter(lambda value: len(value) >= PIECE),  # a PEM key, a multi-line token
)
"""Secrets as the property tests plant them: 16 to 700 characters, on one line or several."""


@given(SECRET_VALUES, st.data(), st.text(max_size=30), st.text(max_size=30))
def test_no_run_of_16_characters_of_a_value_is_left_wherever_it_is_cut(value: str, data: st.DataObject,
                                                                        before: str, after: str):
    assert PIECE_CHARS == PIECE
    start = data.draw(st.integers(0, len(value) - PIECE))
    end = data.draw(st.integers(start + PIECE, len(value)))
    piece = value[start:end]
    s = secret_set(S=value)
    # As cut, as reprlib cuts its repr (escapes and all), squeezed onto one line, and JSON-escaped.
    for shown in (piece, repr(value)[start:end], " ".join(piece.split()), json.dumps(piece)):
        redacted = s.redact(before + shown + after)
        assert leaked(value, redacted) is None, (shown, redacted)
    assert "[secret $S]" in s.redact(before + piece + after)


def test_a_piece_shorter_than_16_characters_is_left_and_ordinary_text_is_untouched():
    s = secret_set(S="ghp_0123456789abcdefghijklmnopqrstuvwxyz")
    assert s.redact("head ghp_0123456789abcdef|") == "head [secret $S]|"  # 20 characters of it
    assert s.redact("ghp_0123456789a|") == "ghp_0123456789a|"  # 15: not a secret's piece by the rule
    assert s.redact("é56789abcdefghijklmnopé") == "é[secret $S]é"  # whole characters around a piece
    assert s.redact("the quick brown fox jumps over the lazy dog") == "the quick brown fox jumps over the lazy dog"


# -- the kernel's set ------------------------------------------------------------------------------------------


def test_the_kernel_set_is_kept_current(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("UNIT_TEST_TOKEN", raising=False)
    before = KERNEL.refresh()
    assert KERNEL.refresh() is before  # nothing changed: the same set, its pattern compiled once
    monkeypatch.setenv("UNIT_TEST_TOKEN", VALUE)
    after = KERNEL.refresh()
    assert after.version == before.version + 1 and "UNIT_TEST_TOKEN" in after.names
    assert redact_text(f"got {VALUE}") == "got [secret $UNIT_TEST_TOKEN]"
    with pytest.raises(ValueError, match="shorter than 8 characters"):
        agentkernel.secrets.add("short", name="tiny")
    try:
        assert agentkernel.secrets.add("a-value-from-a-vault", name="vault") == "[secret $vault]"
        assert redact_text("a-value-from-a-vault") == "[secret $vault]"
    finally:
        KERNEL.clear()


@tool
def rotate() -> str:
    """A read-only tool that makes a credential, puts it in the environment and returns it."""
    import os

    os.environ["SERVICE_TOKEN"] = "svc-created-by-the-tool-0123456789"
    return "new token " + os.environ["SERVICE_TOKEN"]


@tool
async def session_token() -> str:
    """What a background thread put in the environment since the last call."""
    import os

    return "session " + os.environ.get("SESSION_TOKEN", "none")


def test_the_set_is_current_after_every_call_read_only_ones_and_threads_included(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SERVICE_TOKEN", raising=False)
    monkeypatch.delenv("SESSION_TOKEN", raising=False)
    KERNEL.refresh()

    def refresher() -> None:  # a token refreshed by a thread of the notebook's, between two calls
        import os

        os.environ["SESSION_TOKEN"] = "sess-refreshed-by-a-thread-98765"

    def model(request: ModelRequest) -> object:
        calls = sum(item.get("type") == "function_call" for item in request.history)
        if calls == 1:
            thread = threading.Thread(target=refresher)
            thread.start()
            thread.join()
        return [Call("rotate", {}), Call("session_token", {}), "done"][calls]

    try:
        result = asyncio.run(run("go", model=ScriptedModel(model), tools=[rotate, session_token]))
    finally:
        import os

        os.environ.pop("SERVICE_TOKEN", None)
        os.environ.pop("SESSION_TOKEN", None)
    outputs = [item["output"] for item in result.history if item["type"] == "function_call_output"]
    assert outputs == ["new token [secret $SERVICE_TOKEN]", "session [secret $SESSION_TOKEN]"]


def test_a_named_variable_s_new_value_is_covered_at_its_next_use():
    holder = {"value": "first-value-of-the-variable"}
    KERNEL.name("held", lambda: holder["value"])
    try:
        assert redact_text("first-value-of-the-variable") == "[secret $held]"
        holder["value"] = "second-value-of-the-variable"  # as code run in the kernel would set it
        assert redact_text("second-value-of-the-variable") == "[secret $held]"
        version = KERNEL.current.version
        assert KERNEL.current.version == version  # unchanged: not computed again
    finally:
        KERNEL.clear()


def test_markers_round_trip_where_the_text_held_the_secret_and_are_refused_elsewhere(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("UNIT_TEST_TOKEN", VALUE)
    old = f'import os\nAPI = "{VALUE}"\nurl = "https://me:pw1234@host/x"  # {VALUE[:20]}\nprint(1)\n'
    shown = redact_text(old)
    assert shown == ('import os\nAPI = "[secret $UNIT_TEST_TOKEN]"\nurl = "https://host/x"  # [secret '
                     '$UNIT_TEST_TOKEN]\nprint(1)\n')
    # The model edits around the markers: each gets back what the cell held there (a piece is a piece), and the
    # URL's credentials come back where the line kept its URL.
    edited = shown.replace("API =", "api =").replace("print(1)", "print(2)")
    assert restore(edited, old) == old.replace("API =", "api =").replace("print(1)", "print(2)")
    assert restore(shown, old) == old
    # A marker copied, moved or written into new text is refused, saying what to use instead.
    moved = shown.replace('API = "[secret $UNIT_TEST_TOKEN]"\n', "") + 'API = "[secret $UNIT_TEST_TOKEN]"\n'
    for written, read in ((shown + 'again = "[secret $UNIT_TEST_TOKEN]"\n', old), (moved, old),
                          ('API = "[secret $UNIT_TEST_TOKEN]"\n', "")):
        with pytest.raises(ValueError, match=r'the notebook cannot hold a marker; use os.environ\["UNIT_TEST_TOKEN"'):
            restore(written, read)
    with pytest.raises(ValueError, match=r"code cannot hold a marker; use os.environ\[\"UNIT_TEST_TOKEN\"\]"):
        restore('print("[secret $UNIT_TEST_TOKEN]")', where="code")
    with pytest.raises(ValueError, match="has no name code can read"):
        restore("key = '[redacted]'")
    assert restore("print(os.environ['UNIT_TEST_TOKEN'])") == "print(os.environ['UNIT_TEST_TOKEN'])"


def test_mcp_entries_keys():
    config = parse_config({"mcpServers": {
        "docs": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer mcp-token-0123456789"}},
        "gh": {"command": "gh-mcp", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": VALUE, "GIT_PAGER": "cat"}}}})
    assert config.secrets() == {"docs.Authorization": "mcp-token-0123456789", "GITHUB_PERSONAL_ACCESS_TOKEN": VALUE}


# -- the core's roads ------------------------------------------------------------------------------------------


@tool
def careless() -> str:
    """Return a credential."""
    import os

    return "the token is " + os.environ["UNIT_TEST_TOKEN"]


def test_tool_outputs_transcripts_and_the_system_prompt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("UNIT_TEST_TOKEN", VALUE)
    systems: list[str] = []

    def model(request: ModelRequest) -> object:
        systems.append(request.system)
        return Call("careless", {}) if len(systems) == 1 else "done"

    transcript = tmp_path / "t.jsonl"
    # The user gives the value in the prompt on purpose: the model gets it, the transcript does not.
    result = asyncio.run(run(f"use {VALUE}", model=ScriptedModel(model), tools=[careless], transcript=transcript))
    assert result.status == "complete"
    assert result.history[-2]["output"] == "the token is [secret $UNIT_TEST_TOKEN]"
    assert systems == [DEFAULT_SYSTEM_PROMPT, f"{DEFAULT_SYSTEM_PROMPT}\n\n{SECRETS_FRAME}"]
    text = transcript.read_text()
    assert VALUE not in text and "use [secret $UNIT_TEST_TOKEN]" in text

    plain = asyncio.run(run("hi", model=ScriptedModel(lambda r: systems.append(r.system) or "hello")))
    assert plain.status == "complete" and systems[-1] == DEFAULT_SYSTEM_PROMPT  # no marker shown: no frame


def test_a_cassette_holds_markers_and_replays_with_another_value(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    cassette = tmp_path / "c.jsonl"
    monkeypatch.setenv("UNIT_TEST_TOKEN", VALUE)
    recorded = asyncio.run(run("go", model=RecordingModel(ScriptedModel([Call("careless", {}), "ok"]), cassette),
                               tools=[careless]))
    assert recorded.status == "complete"
    assert VALUE not in cassette.read_text() and "[secret $UNIT_TEST_TOKEN]" in cassette.read_text()
    monkeypatch.setenv("UNIT_TEST_TOKEN", "ghp_AnotherValueEntirely98765")
    replayed = asyncio.run(run("go", model=ReplayModel(cassette), tools=[careless]))
    assert replayed.status == "complete", replayed.detail


# -- well-known secret files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [".env", ".env.local", "conf/.env.production", "server.pem", "tls/site.key",
                                  "id_rsa", "id_ed25519", ".ssh/id_work", ".netrc", ".pgpass", ".git-credentials",
                                  ".aws/credentials", "home/.config/gcloud/credentials.json"])
def test_secret_files(path: str):
    assert is_secret_file(Path(path))


@pytest.mark.parametrize("path", ["env.py", ".envrc.md", "id_rsa.pub", ".ssh/id_work.pub", "keys.txt",
                                  "credentials.json", "docs/credentials", "identity.py", "id_mapping.csv"])
def test_files_that_are_not_secret(path: str):
    assert not is_secret_file(Path(path))


def test_the_file_tools_refuse_secret_files_and_list_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("UNIT_TEST_TOKEN", VALUE)
    (tmp_path / ".env").write_text(f"UNIT_TEST_TOKEN={VALUE}\n")
    (tmp_path / "notes.txt").write_text("UNIT_TEST_TOKEN is set in .env\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / ".env")

    def call(name: str, allow: bool = False, **kwargs: object) -> str:
        tools = {t.name: t for t in file_tools(tmp_path, allow_secret_files=allow)}
        try:
            return str(asyncio.run(invoke(tools[name], kwargs)))
        except PermissionError as e:
            return str(e)

    refused = "read_file: .env holds secrets and is not read; the model may use its variables by name"
    assert call("read_file", path=".env") == refused
    assert "holds secrets" in call("read_file", path="link.txt")  # its target is the secret file
    assert call("search_text", pattern="X", path=".env").startswith("search_text: .env holds secrets")
    found = call("search_text", pattern="UNIT_TEST_TOKEN")
    assert "notes.txt:1:" in found and ".env:" not in found and "not searched: 2 files" in found
    assert ".env" in call("list_dir").splitlines()
    # Allowed, they are read; the runner redacts what they hold like any output.
    assert call("read_file", allow=True, path=".env") == f"UNIT_TEST_TOKEN={VALUE}"


def test_an_mcp_tool_s_result_is_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    need("mcp-server-git")
    monkeypatch.setenv("UNIT_TEST_TOKEN", VALUE)
    repo = git_repository(tmp_path / "repo")
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q",
                    "--allow-empty", "-m", f"rotate {VALUE}"], check=True)
    entry = {"command": "mcp-server-git", "args": ["--repository", str(repo)], "trustAnnotations": True}

    async def main() -> list[str]:
        async with connect({"mcpServers": {"git": entry}}, "git") as server:
            model = ScriptedModel([Call("git__git_log", {"repo_path": str(repo)}), "done"])
            result = await run("go", model=model, tools=server.tools(), approve=lambda call, tool: True)
        return [i["output"] for i in result.history if i["type"] == "function_call_output"]

    (log,) = asyncio.run(main())
    assert "rotate [secret $UNIT_TEST_TOKEN]" in log and VALUE not in log
