"""Fault injection for the file tools: slow regexes, huge lines, long paths, names that are not UTF-8.

Each test is a case that broke the run before: it drives the tools the way a model does (through ``invoke`` or a
whole run) and states what must hold — the event loop stays free, Stop and the wall clock act on time, memory
stays bounded, and no message names the absolute root.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_helpers import outputs
from test_file_tools import call, tools_for

from agentkernel import Call, Limits, ScriptedModel, StopSignal, run, validate_history
from agentkernel.tools import files as file_tools_module
from agentkernel.tools import invoke
from agentkernel.tools.files import MAX_OUTPUT_CHARS, PACKAGE_DIR, PathPolicy, file_tools

# (a+)+$ backtracks exponentially over a line of a's that does not end the way it wants: 25 of them held the GIL
# (and so the event loop) for about 10 s before the fix.
SLOW_PATTERN = "(a+)+$"
SLOW_LINE = "a" * 25 + "b"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "fast.txt").write_text("aaa\n")
    (root / "slow.txt").write_text("a\n" + SLOW_LINE + "\n")
    return root


async def largest_stall(work: asyncio.Future[object] | asyncio.Task[object]) -> float:
    """The longest the event loop went without running a 10 ms ticker while ``work`` ran."""
    gaps = [0.0]

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last - 0.01)
            last = now

    ticker = asyncio.ensure_future(tick())
    try:
        await work
    finally:
        ticker.cancel()
    return max(gaps)


# -- #2: a catastrophic regex --------------------------------------------------------------------------------


def test_a_slow_search_never_stalls_the_loop_and_states_its_own_limit(project: Path) -> None:
    search = tools_for(PathPolicy(project, search_seconds=1.5))["search_text"]

    async def main() -> tuple[str, float, float]:
        start = time.monotonic()
        task = asyncio.ensure_future(invoke(search, {"pattern": SLOW_PATTERN}))
        stall = await largest_stall(task)
        return task.result(), stall, time.monotonic() - start

    out, stall, elapsed = asyncio.run(main())
    assert stall < 0.5, f"the event loop stalled for {stall:.2f} s"
    assert 1.4 < elapsed < 3.0
    lines = out.splitlines()
    # Matches found before the limit are kept (fast.txt, and slow.txt's first line), and the cut is stated.
    assert lines[:2] == ["fast.txt:1: aaa", "slow.txt:1: a"]
    assert lines[-1].startswith("[search stopped at its 1.5-second limit in 'slow.txt' (file 2 of 2): "
                                "the pattern is too slow")


@pytest.mark.parametrize("ending", ["max_seconds", "stop"])
def test_stop_and_max_seconds_cut_a_slow_search_within_a_second(project: Path, ending: str) -> None:
    stop = StopSignal()
    limits = Limits(max_seconds=1.0) if ending == "max_seconds" else Limits()
    model = ScriptedModel([Call("search_text", {"pattern": SLOW_PATTERN}), "never reached"])

    async def main() -> tuple[object, float, float]:
        if ending == "stop":
            asyncio.get_running_loop().call_later(1.0, stop.set, "Stop clicked")
        start = time.monotonic()
        task = asyncio.ensure_future(run("find it", model=model, tools=file_tools(project), limits=limits,
                                         stop=stop))
        stall = await largest_stall(task)
        return task.result(), stall, time.monotonic() - start

    start = time.monotonic()
    result, stall, returned = asyncio.run(main())
    exited = time.monotonic() - start
    assert result.status == ("hit_wall_clock" if ending == "max_seconds" else "aborted")  # type: ignore[attr-defined]
    assert returned < 2.0, f"run() returned {returned:.2f} s after it started, 1 s after the cut"
    assert stall < 0.5, f"the event loop stalled for {stall:.2f} s"
    # The search process is killed with the run, not at its own 5 s limit: asyncio.run waits for the tool's
    # thread when it closes, and that thread ends as soon as the process does.
    assert exited < returned + 1.0
    history = result.history  # type: ignore[attr-defined]
    validate_history(history)
    assert [o.get("synthetic") for o in outputs(history)] == [True]


def test_a_huge_pattern_is_refused_at_once(project: Path) -> None:
    search = tools_for(project)["search_text"]
    start = time.monotonic()
    with pytest.raises(ValueError, match="the pattern is 5,000,000 characters long; at most 1,000 are searched"):
        asyncio.run(invoke(search, {"pattern": "x" * 5_000_000}))
    assert time.monotonic() - start < 1.0  # compiling it would take minutes


def test_a_pattern_that_breaks_the_compiler_is_searched_literally(project: Path) -> None:
    out = call(project, "search_text", pattern="a{4294967296}")  # OverflowError
    assert out.splitlines()[0].startswith("['a{4294967296}' is not a valid regular expression (the repetition")


# -- #6: a huge line -----------------------------------------------------------------------------------------

# Run in a child (its address space capped at 1 GB, should a change read far more) whose peak resident size says
# how much was held. Before the fix the whole first line was read to skip it: 2 GB in the case; 512 MB here
# keeps the test quick, and the memory held no longer depends on the size.
HUGE_LINE_READER = textwrap.dedent("""
    import resource, sys
    from agentkernel.tools.files import PathPolicy
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    policy = PathPolicy(sys.argv[1])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    second = policy.read_file("huge.txt", offset=2)
    first = policy.read_file("huge.txt", offset=1, limit=1)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(repr(second)); print(repr(first[-120:])); print(len(first.splitlines()[0])); print(grown)
""")


def test_read_file_holds_bounded_bytes_whatever_the_line_lengths(tmp_path: Path) -> None:
    size = 512 << 20  # a 512 MB first line with no newline: text, then a hole (sparse: no disk used)
    with open(tmp_path / "huge.txt", "wb") as f:
        f.write(b"a" * 100_000)
        f.truncate(size)
        f.seek(size)
        f.write(b"\nsecond line\n")
    done = subprocess.run([sys.executable, "-c", HUGE_LINE_READER, str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr[-2000:]
    second, first_note, first_chars, grown_kb = done.stdout.splitlines()
    assert second == repr(f"second line\n[lines 2-2 of a {size + 13:,}-byte file; pass offset=3 for more]")
    assert first_note.endswith("[line 1 is longer than 80,000 bytes; showing its first 20,000 characters]'")
    assert int(first_chars) == MAX_OUTPUT_CHARS
    assert int(grown_kb) < 50_000, f"reading grew the process by {int(grown_kb) // 1024} MB"


def test_a_file_that_grows_past_the_limit_is_not_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "log.txt").write_text("x\n" * 100)
    policy = PathPolicy(tmp_path, max_file_bytes=50)
    real_stat = Path.stat

    def small_stat(self: Path, **kwargs: object) -> os.stat_result:  # stat says small, the file is bigger
        info = real_stat(self, **kwargs)  # type: ignore[arg-type]
        return os.stat_result((*info[:6], 10, *info[7:]))

    monkeypatch.setattr(Path, "stat", small_stat)
    with pytest.raises(ValueError, match="'log.txt' is over the 50-byte limit"):
        policy.read_file("log.txt")


# -- #8: messages name paths relative to the root ------------------------------------------------------------

LONG_PATHS = ["a" * 300, "sub/" + "b" * 300, "/".join(["deep"] * 1200), "c" * 300 + "/d.txt",
              "agentkernel/" + "e" * 300]  # the last one is also looked up in the installed package


@pytest.mark.parametrize("path", LONG_PATHS,
                         ids=["long-name", "long-name-in-dir", "long-path", "long-dir", "long-name-in-package"])
@pytest.mark.parametrize("name", ["read_file", "list_dir", "search_text"])
def test_errors_never_hold_the_absolute_root(project: Path, name: str, path: str) -> None:
    (project / "sub").mkdir()
    arguments = {"pattern": "x", "path": path} if name == "search_text" else {"path": path}
    with pytest.raises(Exception) as info:
        call(project, name, **arguments)
    message = str(info.value)
    assert str(project) not in message and str(project.parent) not in message and str(PACKAGE_DIR) not in message
    assert path[:40] in message  # the path as the model gave it
    assert "File name too long" in message


def test_a_run_shows_the_model_only_relative_paths(project: Path) -> None:
    model = ScriptedModel([[Call("read_file", {"path": "x" * 300}), Call("list_dir", {"path": "y" * 300})],
                           "done"])
    result = asyncio.run(run("look", model=model, tools=file_tools(project)))
    texts = [o["output"] for o in outputs(result.history)]
    assert all(t.startswith("error: OSError: cannot read '") for t in texts), texts
    assert not any(str(project) in t for t in texts)


def test_errors_naming_the_root_are_rewritten_relative(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever raises inside a tool (here a made-up failure deep in the walk), the root never reaches the model.
    def broken_walk(top: object) -> object:
        raise RuntimeError(f"walk failed at {project / 'sub' / 'x.txt'} (under {project})")

    monkeypatch.setattr(os, "walk", broken_walk)
    with pytest.raises(RuntimeError) as info:
        call(project, "search_text", pattern="x")
    assert str(info.value) == "walk failed at sub/x.txt (under .)"


# -- #3: file names that are not UTF-8 -----------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
def test_names_that_are_not_utf8_are_shown_escaped_and_read_back(project: Path) -> None:
    with open(os.path.join(os.fsencode(project), b"caf\xe9.txt"), "w") as f:
        f.write("latte\n")
    model = ScriptedModel([Call("list_dir"), Call("search_text", {"pattern": "latte"}),
                           Call("read_file", {"path": "caf\\xe9.txt"}), "done"])
    result = asyncio.run(run("look", model=model, tools=file_tools(project), transcript=project.parent / "t.jsonl"))
    assert result.status == "complete", result.summary
    listed, found, read = (o["output"] for o in outputs(result.history))
    assert "caf\\xe9.txt" in listed.splitlines()
    assert found == "caf\\xe9.txt:1: latte"
    assert read == "latte"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.text(st.sampled_from("ab é€\r"), max_size=6), min_size=1, max_size=12),
       offset=st.integers(1, 13), limit=st.integers(1, 5), chunk=st.integers(1, 7))
def test_reading_a_part_in_chunks_gives_the_lines_a_whole_read_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str], offset: int, limit: int, chunk: int
) -> None:
    # Tiny chunks put every line boundary at every place in a chunk; max_file_bytes=0 forces the part reader.
    monkeypatch.setattr(file_tools_module, "READ_CHUNK_BYTES", chunk)
    (tmp_path / "f.txt").write_bytes("\n".join(lines).encode() + b"\n")
    expected = [line.removesuffix("\r") for line in lines][offset - 1 : offset - 1 + limit]
    policy = PathPolicy(tmp_path, max_file_bytes=0)
    if not expected:
        with pytest.raises(ValueError, match="past the end"):
            policy.read_file("f.txt", offset=offset, limit=limit)
        return
    *shown, note = policy.read_file("f.txt", offset=offset, limit=limit).split("\n")
    assert shown == expected
    assert note.startswith(f"[lines {offset}-{offset + len(expected) - 1} of a ")


def test_listing_a_huge_tree_counts_against_the_search_limit(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_walk = os.walk

    def slow_walk(top: object) -> object:  # a tree so big (or a disk so slow) that listing it takes for ever
        for entry in real_walk(top):  # type: ignore[call-overload]
            for _ in range(1000):
                time.sleep(0.01)
                yield entry

    monkeypatch.setattr(os, "walk", slow_walk)
    search = tools_for(PathPolicy(project, search_seconds=0.5))["search_text"]
    start = time.monotonic()
    out = asyncio.run(invoke(search, {"pattern": "a"}))
    assert time.monotonic() - start < 2.0
    assert out.startswith("[search stopped at its 0.5-second limit while listing the files under '.' (")
