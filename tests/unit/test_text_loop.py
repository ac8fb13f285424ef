"""The text-loop guard: a response that repeats itself is cut; tables, lists and code with similar lines are not.

The guard alone (concrete texts and hypothesis properties), then in the loop with a scripted model (through the
magic in a real kernel: ``tests/kernel/test_text_loop_kernel.py``).
"""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkernel import Call, GuardConfig, ScriptedModel, Turn, run, tool, validate_history
from agentkernel.events import Event, TextDelta
from agentkernel.guards import TextLoopGuard

SENTENCE = "She loved to be brave. "


def verdict(text: str, pieces: list[int] | None = None, repeats: int = 10) -> tuple[str | None, int]:
    """Feed ``text`` in deltas of the given sizes (cycled; default: one character at a time); return the trip's
    detail (None if it never tripped) and how many characters had been fed when it did."""
    guard = TextLoopGuard(repeats)
    sizes = pieces or [1]
    fed = step = 0
    while fed < len(text):
        delta = text[fed:fed + sizes[step % len(sizes)]]
        fed, step = fed + len(delta), step + 1
        if trip := guard.feed(delta):
            assert trip.status == "no_progress"
            return trip.detail, fed
    return None, fed


# -- loops are cut -----------------------------------------------------------------------------------------------


def test_a_sentence_repeated_200_times_is_cut_after_about_ten_and_named():
    detail, fed = verdict("Once upon a time there was a cat. " + SENTENCE * 200)
    assert detail == ("the response repeated itself: 'She loved to be brave.' came back 10 times, so it was cut "
                      "(the text so far is kept)")
    assert fed < 35 + 12 * len(SENTENCE)  # cut within a couple of repeats past the tenth, of 200


@pytest.mark.parametrize("loop", [
    "A place where the soul is free,\n",  # SmolLM2's poem about the sea
    "I'm a bit of a biter, but I'm also a bit of a gentle soul. ",
    "10551, 15117, 21157, 32157, 44177, 57317, 72177, ",  # its list of primes
    "- Check the logs again.\n",  # a list item repeated is still a loop
    "ha ",  # a short one, once it has gone on for MIN_SPAN characters
    "Yes. No. Maybe. Yes. No. Maybe! ",  # two alternating variants of a period
])
def test_real_loop_shapes_are_cut(loop: str):
    detail, fed = verdict("Here is my answer.\n" + loop * 300)
    assert detail is not None and fed < 19 + max(12 * len(loop), 300)


def test_repeats_sets_how_many_times_a_chunk_may_come_back():
    text = "Intro. " + SENTENCE * 100
    assert verdict(text, repeats=10)[1] < verdict(text, repeats=20)[1] < verdict(text, repeats=40)[1]
    assert verdict(text, repeats=2)[1] >= TextLoopGuard.MIN_SPAN  # however few, they must cover MIN_SPAN
    assert verdict(text, repeats=0) == (None, len(text))  # 0: off
    with pytest.raises(ValueError, match="at least 2"):
        TextLoopGuard(1)


def test_reset_forgets_the_previous_response():
    going_on, reset = TextLoopGuard(10), TextLoopGuard(10)
    assert going_on.feed(SENTENCE * 9) is None and reset.feed(SENTENCE * 9) is None
    reset.reset()
    assert going_on.feed(SENTENCE * 3) is not None  # twelve in one response
    assert reset.feed(SENTENCE * 3) is None  # three in this one
    assert reset.feed(SENTENCE * 9) is not None


# -- similar lines are not -----------------------------------------------------------------------------------------


def table(rows: int) -> str:
    header = "| # | name | status | owner | last run | notes |\n|---|------|--------|-------|----------|-------|\n"
    return header + "".join(f"| {i} | job-{i % 7} | ok | data-team | 2026-12-01 | nightly export of table t{i % 3} |\n"
                            for i in range(rows))


SIMILAR = {
    "a markdown table of 200 similar rows": "The jobs:\n\n" + table(200) + "\nAll fine.",
    "a table of 200 identical rows": "| 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 0 |\n" * 200,
    "a numbered list of 200 identical items": "".join(f"{i}. Read the file and check every line for the error.\n"
                                                      for i in range(1, 201)),
    "a list sharing a long prefix": "".join(f"- projects/my-google-cloud-project-12345/locations/us-central1/"
                                            f"services/{name}\n" for name in
                                            ["run", "sql", "dns", "iam", "kms", "gke", "pubsub", "storage", "logging",
                                             "monitoring", "tasks", "scheduler", "functions", "redis", "spanner"] * 4),
    "a code block of 200 repeated similar lines": "Here:\n\n```python\n" + "".join(
        f"    result = process(items[{i}], retries=3, timeout=30.0)  # same call\n" for i in range(100)) + "".join(
        "    print('hello world, hello world, hello world, hello world')\n" for _ in range(100)) + "```\nDone.",
    "a tilde code block": "~~~\n" + "loop forever and ever and ever and ever and ever\n" * 100 + "~~~\n",
    "a table of contents with dot leaders": "".join(f"Chapter {i} {'.' * 70} {i * 7}\n" for i in range(1, 60)),
    "dividers and rules": ("-" * 80 + "\n" + "=" * 80 + "\n" + "─" * 80 + "\n" + "* " * 40 + "\n") * 20,
    "a short array": "The weights are [" + "0, " * 60 + "1].",
    "an indented nested list": "".join(f"- step {i}\n    - run the same check on node {i} of the cluster again\n"
                                       for i in range(100)),
}


@pytest.mark.parametrize("name", SIMILAR)
def test_similar_lines_do_not_trip_it(name: str):
    for pieces in ([1], [7], [3, 1, 11], [10_000]):
        assert verdict(SIMILAR[name], pieces) == (None, len(SIMILAR[name])), (name, pieces)


def test_a_loop_after_a_code_block_is_still_cut():
    detail, _ = verdict(SIMILAR["a code block of 200 repeated similar lines"] + "\n" + SENTENCE * 50)
    assert detail is not None and "She loved to be brave." in detail


def test_what_it_keeps_stays_bounded_however_long_the_response():
    guard = TextLoopGuard(10)
    words = [f"w{i}" for i in range(5000)]
    rng = random.Random(1)
    most = 0
    for _ in range(20_000):  # about a megabyte of text that never repeats a 50-character chunk
        assert guard.feed(" ".join(rng.choices(words, k=10)) + ". ") is None
        most = max(most, len(guard._text), len(guard._chunks), len(guard._order))
    assert most <= 2 * (10 * TextLoopGuard.MAX_PERIOD + TextLoopGuard.CHUNK)


# -- properties ----------------------------------------------------------------------------------------------------

words = st.text(alphabet=st.characters(categories=["L", "N"]), min_size=1, max_size=9)
splits = st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(sentence=st.lists(words, min_size=2, max_size=12).map(" ".join), end=st.sampled_from([". ", "\n", ", ", "! "]),
       pieces=splits)
def test_any_sentence_repeated_many_times_is_cut_however_it_is_split(sentence: str, end: str, pieces: list[int]):
    text = "Start. " + (sentence + end) * 200
    detail, fed = verdict(text, pieces)
    assert detail is not None
    assert verdict(text, [len(text)])[0] == detail  # the same verdict whole or in pieces


cells = st.text(alphabet=st.characters(categories=["L", "N", "Zs"]), max_size=12)


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.lists(cells, min_size=1, max_size=6), min_size=1, max_size=40),
       repeat=st.integers(min_value=1, max_value=30), pieces=splits)
def test_tables_never_trip_it_even_with_identical_rows(rows: list[list[str]], repeat: int, pieces: list[int]):
    text = "".join("| " + " | ".join(row) + " |\n" for row in rows) * repeat
    assert verdict(text, pieces)[0] is None


@settings(max_examples=100, deadline=None)
@given(items=st.lists(st.lists(words, min_size=1, max_size=15).map(" ".join), min_size=1, max_size=5),
       count=st.integers(min_value=1, max_value=200), marker=st.sampled_from(["{}. ", "{}) ", "Step {}: "]),
       pieces=splits)
def test_numbered_lists_never_trip_it_even_when_their_items_repeat(items: list[str], count: int, marker: str,
                                                                   pieces: list[int]):
    text = "".join(marker.format(i + 1) + items[i % len(items)] + "\n" for i in range(count))
    assert verdict(text, pieces)[0] is None


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(st.text(max_size=80).map(lambda s: s.replace("`", "'").replace("~", "-")), max_size=30),
       repeat=st.integers(min_value=1, max_value=20), fence=st.sampled_from(["```", "~~~", "  ```python"]),
       pieces=splits)
def test_code_blocks_never_trip_it_whatever_they_hold(lines: list[str], repeat: int, fence: str, pieces: list[int]):
    body = "".join(line.replace("\n", " ").replace("\r", " ") + "\n" for line in lines) * repeat
    text = f"Code:\n{fence}\n{body}{fence.strip()[:3]}\nThat is all."
    assert verdict(text, pieces)[0] is None


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10**6), pieces=splits)
def test_prose_that_does_not_repeat_never_trips_it(seed: int, pieces: list[int]):
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(300)] + ["the", "a", "of", "and", "to", "is"] * 20
    text = " ".join(". ".join(" ".join(rng.choices(vocabulary, k=rng.randint(3, 15))) for _ in range(5))
                    for _ in range(20))
    assert verdict(text, pieces)[0] is None


# -- in the loop ---------------------------------------------------------------------------------------------------


def test_a_turn_repeating_a_sentence_200_times_ends_no_progress_with_its_text_kept():
    model = ScriptedModel(["Let me think. " + SENTENCE * 200])
    seen: list[Event] = []
    result = asyncio.run(run("tell me a story", model=model, on_event=seen.append))
    assert result.status == "no_progress", result.summary
    assert "'She loved to be brave.' came back 10 times" in result.summary
    kept = result.history[-1]
    assert kept["role"] == "assistant" and kept["content"].startswith("Let me think. " + SENTENCE * 9)
    assert len(kept["content"]) < 15 + 15 * len(SENTENCE)  # cut: the other ~186 repeats were never read
    assert result.answer == kept["content"]
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == kept["content"]  # the panel saw the same
    validate_history(result.history)


def test_with_the_guard_off_the_same_turn_completes_in_full():
    text = "Let me think. " + SENTENCE * 200
    result = asyncio.run(run("tell me a story", model=ScriptedModel([text]), guards=GuardConfig(text_repeats=0)))
    assert result.status == "complete" and result.answer == text


def test_each_response_is_judged_alone():
    # Nine repeats in each of two responses (with a tool round between) are not ten in one.
    @tool
    def look() -> str:
        """Look around."""
        return "nothing new"

    model = ScriptedModel([Turn(text=SENTENCE * 9, calls=[Call("look")]), SENTENCE * 9])
    result = asyncio.run(run("go", model=model, tools=[look]))
    assert result.status == "complete", result.summary
