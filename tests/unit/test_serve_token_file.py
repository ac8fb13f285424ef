"""The ``%agent_serve`` panel's snippets and the token file they read (issue 36): no snippet holds the token; the
file is its user's only, and a link planted where it goes is replaced, never followed."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agentkernel.jupyter.serve import client_name, snippets, token_file, write_token

URL = "http://127.0.0.1:8765/mcp"


@given(folder=st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30))
def test_every_snippet_reads_the_token_file_and_holds_no_token(folder: str):
    path = f"/home/{folder}/agentkernel-serve-8765.token"
    shown = snippets(URL, path)
    assert {client_name(label) for label in shown} == {"Claude Code", "Codex", "Gemini CLI", "VS Code",
                                                       "stdio clients"}
    for label, text in shown.items():
        assert URL in text
        assert "Bearer " not in text.replace("Bearer $(cat", "").replace("Bearer $AGENTKERNEL_TOKEN", "") \
            .replace("Bearer ${input:agentkernel-token}", ""), (label, text)
    claude = shown["Claude Code"]
    words = shlex.split(claude.replace(f"$(cat {shlex.quote(path)})", "TOKEN"))
    assert words[:3] == ["claude", "mcp", "add"] and words[-1] == "Authorization: Bearer TOKEN"
    gemini = next(text for label, text in shown.items() if label.startswith("Gemini CLI"))
    assert json.loads(gemini)["mcpServers"]["notebook"]["headers"] == {"Authorization": "Bearer $AGENTKERNEL_TOKEN"}


def test_the_token_file_is_its_users_only_and_a_planted_link_is_not_followed(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    path = token_file(8765)
    assert path.parent == tmp_path / "runtime" and path.name == "agentkernel-serve-8765.token"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    path.parent.mkdir()
    path.symlink_to(victim)  # someone planted a link where the token goes
    write_token(path, "tok-0123456789")
    assert victim.read_text() == "keep me"
    assert not path.is_symlink() and path.read_text() == "tok-0123456789\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    write_token(path, "tok-second")  # a stale file of an earlier session on the same port is replaced
    assert path.read_text() == "tok-second\n"


def test_a_sessions_transcript_goes_where_runs_go_unless_told_and_a_bad_folder_is_one_line(tmp_path: Path,
                                                                                         monkeypatch):
    import pytest

    from agentkernel.errors import AgentConfigError
    from agentkernel.jupyter.serve import session_transcript

    monkeypatch.setenv("AGENTKERNEL_TRANSCRIPTS", str(tmp_path / "default"))
    by_default = session_transcript(None, "0123456789ab")
    assert by_default is not None and by_default.path.parent == tmp_path / "default"
    assert by_default.path.name.endswith("-0123456789ab.jsonl")
    by_default.close()
    assert session_transcript("", "0123456789ab") is None
    chosen = session_transcript(str(tmp_path / "chosen"), "0123456789ab")
    assert chosen is not None and chosen.path.parent == tmp_path / "chosen"
    chosen.close()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(AgentConfigError) as refused:
        session_transcript(str(tmp_path / "a-file"), "0123456789ab")
    assert str(refused.value).startswith("transcripts: cannot write a transcript in") and "\n" not in str(refused.value)
