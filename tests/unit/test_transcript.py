"""Transcripts (agentkernel/listeners/transcript.py): written a line per committed item, read back as the history of
the last run in the file, torn lines skipped, image data never written."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_helpers import run_sync

from agentkernel import Call, ScriptedModel, ToolOutput, load_transcript, tool, validate_history
from agentkernel.listeners.transcript import Transcript


@tool
def snapshot() -> ToolOutput:
    """Take a picture."""
    return ToolOutput("[image/png 1x1]", [{"media_type": "image/png", "data": "iVBORw0KGgo" * 100}])


def test_a_run_reads_back_as_its_history_without_the_image_data(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    result = run_sync("look", model=ScriptedModel([[Call("snapshot")], "a dot"]), tools=[snapshot],
                      transcript=path)
    text = path.read_text()
    assert "iVBORw0KGgo" not in text and '"sha256"' in text  # a reference, not the data
    back = load_transcript(path)
    validate_history(back)
    assert [i["type"] for i in back] == [i["type"] for i in result.history]
    assert all("images" not in item for item in back)


def test_the_last_run_in_a_file_wins_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    run_sync("first", model=ScriptedModel(["one"]), transcript=path)
    run_sync("second", model=ScriptedModel(["two"]), transcript=path)
    with path.open("a") as f:
        f.write('{"event": "item", "item": {"type": "mess')  # the kernel died mid-write
    texts = [str(i.get("content")) for i in load_transcript(path)]
    assert any("second" in t for t in texts) and not any("first" in t for t in texts)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device that is always full)")
def test_a_write_that_fails_ends_the_transcript_not_the_run() -> None:
    transcript = Transcript("/dev/full")
    with pytest.warns(RuntimeWarning, match="the run goes on without it"):
        transcript.write({"event": "start"})
    assert transcript.error is not None and "No space left on device" in transcript.error
    transcript.write({"event": "finish"})  # ignored from now on, without another warning


def test_a_folder_keeps_the_newest_runs_and_never_touches_other_files(tmp_path: Path) -> None:
    from agentkernel.listeners.transcript import KEEP, run_transcript

    names = [f"202612{day:02d}-{second:06d}-{second:012x}.jsonl" for day in (1, 2) for second in range(KEEP)]
    for name in names:
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "notes.jsonl").write_text("mine\n")
    (tmp_path / "20261201-000000-run.jsonl").write_text("named by hand\n")
    result = run_sync("hi", model=ScriptedModel(["hello"]), transcript=tmp_path)
    written = Path(result.transcript or "")
    assert written.parent == tmp_path and written.read_text().count('"event": "item"') == 2
    runs = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("notes.jsonl", "20261201-000000-run.jsonl"))
    assert len(runs) == KEEP and runs == sorted([*names[-(KEEP - 1):], written.name])  # the oldest went
    assert (tmp_path / "notes.jsonl").read_text() == "mine\n" and (tmp_path / "20261201-000000-run.jsonl").exists()
    assert run_transcript(tmp_path / "not-made-yet", "0123456789ab").name.endswith("-0123456789ab.jsonl")
