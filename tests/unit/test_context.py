"""The context window: the model's view of the history is compacted instead of the run dying at the window.

In-process tests of agentkernel/context.py and the loop's use of it; the same behaviours against a real HTTP server
that enforces a window (through the openai SDK) are in tests/unit/test_context_server.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

from runtime_helpers import outputs, run_sync

from agentkernel import Call, GuardConfig, Limits, ModelRequest, ScriptedModel, tool, validate_history
from agentkernel.events import ContextCompacted, ContextUpdated
from agentkernel.models.base import ContextOverflowError, ModelEvent, UsageEvent
from agentkernel.models.overflow import overflow_numbers
from agentkernel.record.context import NOTE_HEADER, ContextView, item_tokens
from agentkernel.record.history import function_call, function_call_output, user_message


def chunk_text(n: int) -> str:
    """1.5-2 KB of text that differs for every n."""
    line = f"line of chunk {n}: " + "abcdefghij" * 6
    return "\n".join(f"{line} #{i}" for i in range(20 + n % 6))


@tool
def read_chunk(n: int) -> str:
    """Read chunk n of the data."""
    return chunk_text(n)


def server_tokens(request: ModelRequest) -> int:
    """A count of a request the way a server might make it: bytes of its JSON / 3.5 (not the view's estimate)."""
    body = json.dumps({"system": request.system, "input": request.history, "tools": request.tools})
    return int(len(body.encode()) / 3.5)


class WindowModel:
    """A scripted model behind a context window: a request longer than ``window`` (by :func:`server_tokens`) is
    refused with ContextOverflowError, as the OpenAI adapters raise it for a server's overflow answer."""

    def __init__(self, script: Any, window: int, *, say_window: bool = True, summary: Any = None,
                 scale: float = 1.0):
        self.inner = ScriptedModel(script, summary=summary)
        self.name = "window"
        self.window = window
        self.say_window = say_window
        self.scale = scale  # a tokenizer that counts many more tokens than the view's estimate
        self.sizes: list[int] = []
        self.refused: list[int] = []
        self.requests: list[ModelRequest] = []
        self.log: list[str] = []  # "a" for each request answered, "r" for each refused

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        size = int(self.scale * server_tokens(request))
        if size > self.window:
            self.refused.append(size)
            self.log.append("r" if request.purpose == "turn" else "s")
            raise ContextOverflowError(f"request ({size} tokens) exceeds the available context size",
                                       window=self.window if self.say_window else None,
                                       prompt_tokens=size if self.say_window else None)
        self.sizes.append(size)
        self.log.append("a")
        self.requests.append(ModelRequest(request.system, list(request.history), request.tools, request.purpose))
        async for event in self.inner.stream(request):
            if isinstance(event, UsageEvent):  # a server reports its own count of the prompt
                event = UsageEvent(input_tokens=size, output_tokens=event.output_tokens)
            yield event


def reading_script(rounds: int) -> list[Any]:
    return [Call("read_chunk", {"n": i}) for i in range(rounds)] + ["Read them all."]


def test_a_long_run_compacts_and_completes_with_every_output_kept_in_the_history():
    model = WindowModel(reading_script(200), window=8000)
    events: list[Any] = []
    result = run_sync("Read chunks 0 to 199.", model=model, tools=[read_chunk], context_window=8000,
                      on_event=events.append)
    assert result.status == "complete", result.summary
    assert model.refused == [] and max(model.sizes) <= 8000
    got = [o["output"] for o in outputs(result.history)]
    assert got == [chunk_text(i) for i in range(200)]  # the record is whole: nothing elided there
    validate_history(result.history)
    for request in model.requests:
        validate_history(request.history)  # every request is a valid history too
    assert result.compactions >= 5
    compacted = [e.compaction for e in events if isinstance(e, ContextCompacted)]
    assert len(compacted) == result.compactions
    assert all(c.tokens_after < c.tokens_before for c in compacted)
    assert any(isinstance(e, ContextUpdated) and e.window == 8000 for e in events)


def test_between_compactions_each_request_extends_the_one_before():
    model = WindowModel(reading_script(120), window=8000)
    result = run_sync("Read.", model=model, tools=[read_chunk], context_window=8000)
    assert result.status == "complete"
    turns = [r for r in model.requests if r.purpose == "turn"]
    extends = sum(1 for a, b in zip(turns, turns[1:], strict=False) if b.history[:len(a.history)] == a.history)
    # Only a compaction re-cuts the prompt; every other request is the previous one plus what is new.
    assert extends == len(turns) - 1 - result.compactions


def test_old_outputs_become_placeholders_that_name_the_call_and_say_how_to_get_them_back():
    model = WindowModel(reading_script(40), window=6000)
    result = run_sync("Read.", model=model, tools=[read_chunk], context_window=6000)
    assert result.status == "complete" and result.compactions >= 1
    last = model.requests[-1].history
    elided = [item for item in last if item.get("type") == "function_call_output" and item.get("elided")]
    assert elided
    first = elided[0]["output"]
    assert first.startswith("[elided to fit the context window: read_chunk(n=")
    assert "characters; call it again to see them]" in first
    assert "old tool outputs are replaced by a short note" in model.requests[-1].system  # told in the frame
    # The newest outputs are in full; the placeholders are the oldest ones.
    kinds = [bool(item.get("elided")) for item in last if item.get("type") == "function_call_output"]
    assert kinds == sorted(kinds, reverse=True)


def test_a_short_output_is_never_elided_and_a_call_never_loses_its_output():
    view = ContextView([], window=9000, reserve=0)
    for i in range(30):
        view.append(function_call(f"c{i}", "ping", "{}"))
        view.append(function_call_output(f"c{i}", "pong" if i % 2 else "x" * 2000))
    assert view.needs_compaction()
    compaction = asyncio.run(view.compact(None))
    validate_history(view.items)
    assert [item["output"] for item in view.items if item.get("call_id", "").endswith(("1", "3", "5", "7", "9"))
            and item["type"] == "function_call_output"] == ["pong"] * 15  # cheaper than a placeholder: kept
    assert compaction.outputs_elided >= 1 and compaction.tokens_after <= view.low_water < compaction.tokens_before
    assert not view.items[-1].get("elided")  # the newest output: the model has not seen it yet


def test_when_eliding_is_not_enough_older_turns_are_summarised_keeping_user_messages_verbatim():
    summaries: list[ModelRequest] = []

    def summary(request: ModelRequest) -> str:
        summaries.append(request)
        return "Task: read the chunks.\nDone and found: chunks up to the last one read.\nLeft to do: the rest."

    model = WindowModel(reading_script(300), window=6000, summary=summary)
    prompt = "Please read chunks 0 to 299, all of them."
    result = run_sync(prompt, model=model, tools=[read_chunk], context_window=6000)
    assert result.status == "complete", result.summary
    assert summaries, "the placeholders alone outgrew the window: the model must have been asked for a summary"
    request = summaries[0]
    assert request.purpose == "summary" and "Left to do" in request.history[-1]["content"]
    assert server_tokens(request) <= 6000  # the summary request fits the window too
    last = model.requests[-1].history
    assert last[0] == user_message(prompt)  # the user's words, verbatim, first
    notes = [item for item in last if str(item.get("content", "")).startswith(NOTE_HEADER)]
    assert len(notes) == 1 and "Task: read the chunks." in notes[0]["content"]
    assert result.usage.requests == len(model.sizes)  # summary requests count as requests (for --max-iterations)
    assert len(outputs(result.history)) == 300


def test_a_summary_that_does_not_shrink_the_context_is_replaced_by_the_runtime_note():
    model = WindowModel(reading_script(300), window=6000, summary=lambda request: "padding " * 3000)
    result = run_sync("Read all.", model=model, tools=[read_chunk], context_window=6000)
    assert result.status == "complete", result.summary
    notes = [item["content"] for item in model.requests[-1].history if item.get("compaction")]
    assert notes and "padding" not in notes[0] and "- read_chunk(n=" in notes[0]


def test_the_window_is_learned_from_the_first_overflow_error():
    model = WindowModel(reading_script(60), window=8000)
    result = run_sync("Read.", model=model, tools=[read_chunk])  # no window given
    assert result.status == "complete", result.summary
    assert len(model.refused) == 1  # refused once, then compacted to fit
    assert max(model.sizes) <= 8000 and len(outputs(result.history)) == 60


def test_an_overflow_that_names_no_numbers_is_still_recovered_from():
    model = WindowModel(reading_script(60), window=8000, say_window=False)
    result = run_sync("Read.", model=model, tools=[read_chunk])
    assert result.status == "complete", result.summary
    assert 1 <= len(model.refused) <= 3


def test_a_prompt_that_can_never_fit_ends_context_overflow_with_the_numbers_and_no_loop():
    model = WindowModel(["never reached"], window=300)
    result = run_sync("x " * 2000, model=model, tools=[read_chunk])
    assert result.status == "context_overflow" and len(model.refused) == 1  # learned, compacted, cannot fit
    assert "300-token window" in result.detail and "the last turn alone are too long" in result.detail
    known = WindowModel(["never reached"], window=300)
    result = run_sync("x " * 2000, model=known, tools=[read_chunk], context_window=300)
    assert result.status == "context_overflow" and known.refused == [] and known.sizes == []
    assert "300-token window" in result.detail


def test_a_server_that_keeps_refusing_after_two_compactions_ends_the_run_not_a_loop():
    # Its tokenizer counts 20 times the view's estimate and its errors give no numbers: each compaction looks
    # enough to the view and is not.
    model = WindowModel(reading_script(40), window=6000, say_window=False, scale=20)
    result = run_sync("Read.", model=model, tools=[read_chunk])
    assert result.status == "context_overflow", result.summary
    assert max(run.count("r") for run in "".join(model.log).split("a")) <= 3  # never more than 3 turns refused in a row
    validate_history(result.history)


def test_a_resumed_history_longer_than_the_window_is_compacted_before_its_first_request():
    first = run_sync("Read.", model=ScriptedModel(reading_script(40)), tools=[read_chunk])
    model = WindowModel(["Done."], window=5000)
    result = run_sync("Go on.", model=model, tools=[read_chunk], history=first.history, context_window=5000)
    assert result.status == "complete" and result.compactions == 1 and model.refused == []
    assert result.history[:len(first.history)] == first.history


def test_re_reading_an_elided_output_is_allowed_once_but_a_spiral_still_trips_a_guard():
    def rereader(limit: int):
        """Reads chunks; whenever chunk 0's output is elided from its view, reads chunk 0 again."""
        state = {"reads": 0, "next": 1}

        def turn(request: ModelRequest) -> Any:
            history = request.history
            calls_by_id = {i["call_id"]: i for i in history if i.get("type") == "function_call"}
            zero_visible = any(i.get("type") == "function_call_output" and not i.get("elided")
                               and calls_by_id[i["call_id"]]["arguments"] == '{"n": 0}' for i in history)
            if not zero_visible and state["next"] > 1 and state["reads"] < limit:
                state["reads"] += 1
                return Call("read_chunk", {"n": 0})
            state["next"] += 1
            return Call("read_chunk", {"n": state["next"]})
        return turn

    guards = GuardConfig(repeat_limit=2, stuck_window=0)
    once = run_sync("Read.", model=WindowModel(rereader(1), window=5000), tools=[read_chunk],
                    context_window=5000, guards=guards, limits=Limits(max_tool_calls=120))
    # The first read and one re-read after compaction: 2, the limit, were the elided read not forgiven.
    assert once.status == "hit_tool_call_cap", once.summary
    spiral = run_sync("Read.", model=WindowModel(rereader(10), window=5000), tools=[read_chunk],
                      context_window=5000, guards=guards, limits=Limits(max_tool_calls=400))
    assert spiral.status == "repeated_tool_call", spiral.summary
    assert spiral.detail.startswith('read_chunk {"n": 0} returned the same output')


def test_summary_requests_count_towards_the_iteration_budget():
    model = WindowModel(reading_script(300), window=6000, summary=lambda r: "Task: read. Done: some. Left: rest.")
    result = run_sync("Read.", model=model, tools=[read_chunk], context_window=6000,
                      limits=Limits(max_iterations=150))
    assert result.status == "hit_iteration_cap"
    assert result.usage.requests == 150 and result.rounds < 150


def test_images_are_kept_on_the_newest_four_outputs_and_dropped_first_when_compacting():
    view = ContextView([], window=100_000)
    for i in range(6):
        view.append(function_call(f"c{i}", "plot", "{}"))
        item = function_call_output(f"c{i}", f"figure {i}")
        item["images"] = [{"media_type": "image/png", "data": "AAAA"}]
        view.append(item)
    with_images = [i for i, item in enumerate(view.items) if item.get("images")]
    assert len(with_images) == 4 and with_images[0] == 5  # the two oldest lost theirs
    assert "no longer shown" in view.items[1]["output"]
    assert item_tokens(view.items[1]) < item_tokens(view.items[-1])
    two = function_call_output("c9", "two figures")
    two["images"] = [{"media_type": "image/png", "data": "BBBB"}] * 2
    view.append(function_call("c9", "plot", "{}"))
    view.append(two)
    assert sum(len(item.get("images", [])) for item in view.items) == 4  # images, not outputs, are counted
    assert [i for i, item in enumerate(view.items) if item.get("images")] == [9, 11, 13]


def test_overflow_bodies_of_openai_llama_cpp_and_vllm_are_recognised_with_their_numbers():
    openai_body = {"message": "This model's maximum context length is 128000 tokens. However, your messages "
                              "resulted in 130512 tokens. Please reduce the length of the messages.",
                   "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}
    assert overflow_numbers(openai_body, "") == (True, 128000, 130512)
    llama = {"code": 400, "message": "request (5532 tokens) exceeds the available context size (4096 tokens), "
                                     "try increasing it", "type": "exceed_context_size_error",
             "n_prompt_tokens": 5532, "n_ctx": 4096}
    assert overflow_numbers(llama, "") == (True, 4096, 5532)
    vllm = {"object": "error", "message": "This model's maximum context length is 4096 tokens. However, you "
                                          "requested 5000 tokens (4488 in the messages, 512 in the completion). "
                                          "Please reduce the length of the messages or completion.",
            "type": "BadRequestError", "param": None, "code": 400}
    assert overflow_numbers(vllm, "") == (True, 4096, 4488)
    assert overflow_numbers({"message": "Invalid value for 'temperature'", "code": None}, "")[0] is False


def test_each_compaction_is_written_to_the_transcript_and_the_transcript_keeps_the_full_history(tmp_path):
    from agentkernel import load_transcript

    path = tmp_path / "run.jsonl"
    model = WindowModel(reading_script(40), window=6000)
    result = run_sync("Read.", model=model, tools=[read_chunk], context_window=6000, transcript=path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    compactions = [r for r in records if r["event"] == "compaction"]
    assert len(compactions) == result.compactions > 0
    assert {"reason", "tokens_before", "tokens_after", "outputs_elided", "turns_summarised"} <= set(compactions[0])
    assert load_transcript(path) == result.history  # elided nowhere but in what the model was sent


def test_a_note_counts_the_calls_an_earlier_note_replaced():
    model = WindowModel(reading_script(120), window=5000)
    result = run_sync("Read.", model=model, tools=[read_chunk], context_window=5000)
    assert result.status == "complete" and result.compactions >= 3
    last = model.requests[-1].history
    (note,) = [item["content"] for item in last if item.get("compaction")]
    in_view = sum(1 for item in last if item.get("type") == "function_call")
    taken_out = len([i for i in result.history if i.get("type") == "function_call"]) - in_view
    assert f"It held {taken_out} tool calls;" in note  # every call taken out, not only the last batch's
    listed = note.count("\n- read_chunk(")
    assert 0 < listed < taken_out and f"\n{taken_out - listed} earlier calls, then:\n" in note
