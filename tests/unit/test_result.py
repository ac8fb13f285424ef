"""LoopResult: one way to say each thing, and a short display whatever the run."""

from __future__ import annotations

from IPython.lib.pretty import pretty
from runtime_helpers import run_sync

from agentkernel import Call, LoopResult, ScriptedModel, Usage, tool


@tool
def echo(text: str) -> str:
    """Return the text."""
    return text


def long_run() -> LoopResult:
    script = [Call("echo", {"text": f"{i} " + "x" * 5000}) for i in range(40)]
    return run_sync("go", model=ScriptedModel([*script, "\n".join(f"line {i}" for i in range(100))]), tools=[echo])


def test_display_is_short_whatever_the_run():
    result = long_run()
    assert len(repr(result)) > 0 and "x" * 100 not in repr(result)  # the history is not in the repr
    text = pretty(result)
    assert len(text.splitlines()) <= 40 and len(text) < 4000, text
    assert text.startswith("LoopResult: complete · 41 rounds · 40 tool calls")
    assert "line 0" in text and "line 99" not in text and "92 more lines in .answer" in text
    html = result._repr_html_()
    assert len(html) < 5000 and "x" * 100 not in html and "&lt;" not in html[:20]


def test_status_is_the_one_stored_ending():
    stopped = LoopResult(status="hit_wall_clock", answer=None, history=[], usage=Usage(), rounds=2, tool_calls=1,
                         detail="ran out of its 5 s of wall clock.")
    assert stopped.requires_human
    assert stopped.summary == ("Stopped with HIT_WALL_CLOCK after 2 rounds and 1 tool call: "
                               "ran out of its 5 s of wall clock.")
    assert "why: ran out of its 5 s" in pretty(stopped)
    done = LoopResult(status="complete", answer="ok", history=[], rounds=1)
    assert not done.requires_human and done.summary == "Answered after 1 round and 0 tool calls."
    for gone in ("code", "message", "ok"):
        assert not hasattr(done, gone)
