"""A hostile model hides what an approval would run: invisible and bidirectional control characters
(the "Trojan Source" trick: U+202E makes code that runs look like part of a comment) are shown as ``⟨U+202E⟩`` and
counted, by one function (:func:`agentkernel.text.reveal`), in the panel's approval, its diff of a cell edit and the
terminal's question. The pty test (tests/kernel/test_terminal.py) and the browser test (tests/browser/) show them
where a person reads them."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkernel import Call, ScriptedModel, tool
from agentkernel.jupyter.approvals import terminal_approver
from agentkernel.jupyter.render import arguments_html, change_html
from agentkernel.listeners.timeline import call_title
from agentkernel.stop import StopSignal
from agentkernel.text import HIDDEN_CATEGORIES, hidden_warning, reveal
from agentkernel.tools import ToolCall

BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\U000e0041"]
hidden_chars = st.one_of(st.sampled_from(BIDI + ZERO_WIDTH),
                         st.characters(categories=["Cf", "Cc", "Zl", "Zp"], exclude_characters="\t\n"))
texts = st.lists(st.one_of(st.text(max_size=8), hidden_chars), max_size=30).map("".join)
SHOWN = re.compile(r"⟨U\+([0-9A-F]{4,6})⟩")


def hidden_in(text: str) -> list[str]:
    return [c for c in text if c not in "\t\n" and unicodedata.category(c) in HIDDEN_CATEGORIES]


@given(texts)
def test_every_hidden_character_is_shown_counted_and_nothing_else_changes(text: str) -> None:
    shown, count = reveal(text)
    assert hidden_in(shown) == []
    assert count == len(hidden_in(text))
    assert len(SHOWN.findall(shown)) - len(SHOWN.findall(text)) == count
    if "⟨" not in text:  # nothing is lost: each mark reads back as its character
        assert SHOWN.sub(lambda m: chr(int(m.group(1), 16)), shown) == text
    if not count:
        assert shown == text


@given(texts)
def test_the_panels_approval_shows_no_hidden_character_and_counts_them(code: str) -> None:
    count = len(hidden_in(code))
    for name, key in (("run_python", "code"), ("add_cell", "source"), ("my_tool", "text")):
        shown = arguments_html(json.dumps({key: code, "note": "\u202e"}), name)
        assert hidden_in(shown) == []
        what = "call" if name == "my_tool" else "code" if name == "run_python" else "cell"
        # As JSON (a tool without code), the controls below U+0020 are written as escapes (\b), visible already.
        raw = count if what != "call" else len(hidden_in(json.dumps(code, ensure_ascii=False)))
        assert hidden_warning(raw + 1, what) in html_text(shown)
    diff = change_html("x = 1\u200b", code)
    assert hidden_in(diff) == []
    assert (hidden_warning(count, "cell") in html_text(diff)) if count else "invisible" not in diff
    assert hidden_in(call_title(ToolCall("c1", "run_python", json.dumps({"code": code}, ensure_ascii=False)))) == []


def html_text(fragment: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_the_warning_counts_in_words() -> None:
    assert hidden_warning(0) == ""
    assert hidden_warning(1).startswith("this code holds 1 invisible character, shown as ⟨U+…⟩")
    assert hidden_warning(3, "cell").startswith("this cell holds 3 invisible characters")


def test_trojan_source_code_is_shown_as_it_runs() -> None:
    # Looks like `access_level = "user"  # check if admin` and a harmless comment; it sets "admin".
    code = 'access_level = "user\u202e \u2066# check if admin\u2069 \u2066" ;access_level = "admin"'
    shown = html_text(arguments_html(json.dumps({"code": code}), "run_python"))
    assert "this code holds 4 invisible characters" in shown
    assert "⟨U+202E⟩" in shown and shown.count("⟨U+2066⟩") == 2 and "⟨U+2069⟩" in shown


def test_the_terminal_question_shows_and_counts_them(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("builtins.input", lambda prompt: (print(prompt, end=""), "y")[1])
    code = "x = 1 \u202e# y = 2\u200b"
    ask = terminal_approver(StopSignal())

    @tool(read_only=False)
    def run_python(code: str) -> str:
        """Run."""
        return "ran"

    decision = ask(ToolCall("c1", "run_python", json.dumps({"code": code})), run_python)
    out = capsys.readouterr().out
    assert decision.approve
    assert hidden_in(out.replace("\n", "")) == []
    assert "x = 1 ⟨U+202E⟩# y = 2⟨U+200B⟩" in out
    assert out.index("WARNING: this call holds 2 invisible characters") < out.index("Approve run_python?")


def test_a_scripted_run_keeps_the_code_it_ran_unchanged() -> None:
    # Showing is all reveal does: the code that runs is the model's, character for character.
    ran: list[str] = []

    @tool(read_only=False)
    def run_code(code: str) -> str:
        """Run."""
        ran.append(code)
        return "ok"

    from runtime_helpers import run_sync

    code = "a = 1\u202e\u200b"
    run_sync("go", model=ScriptedModel([Call("run_code", {"code": code}), "done"]), tools=[run_code],
             approve=lambda call, tool: True)
    assert ran == [code]
