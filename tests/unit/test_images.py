"""Images for the model without a kernel: the byte budget (downscaling with Pillow, a clear note without it), a tool
returning ``ToolOutput``, both adapters through the real openai SDK against the loopback server (an output without
``images`` stays text), the adapters' incremental conversion, cassette and transcript references, and which models
get images by default. The kernel side (run_python's figures through the magic) is in test_kernel_images.py."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
from pathlib import Path

import pytest
from openai_server import TEST_KEY, Reply, ScriptedServer, chat_events, responses_events

from agentkernel import Call, ReplayModel, ScriptedModel, ToolOutput, load_transcript, run, tool, validate_history
from agentkernel.models import OpenAIChatModel, OpenAIResponsesModel, RecordingModel
from agentkernel.models.base import accepts_images
from agentkernel.models.openai_chat import chat_messages
from agentkernel.record.images import MAX_IMAGE_BYTES, image_reference, image_size, model_image

PIL = pytest.importorskip("PIL.Image")


def png(width: int, height: int, noise: bool = False) -> str:
    """A PNG as base64: flat grey, or random noise (which PNG cannot compress)."""
    if noise:
        import numpy as np

        picture = PIL.fromarray(np.random.default_rng(1).integers(0, 255, (height, width, 3), dtype=np.uint8))
    else:
        picture = PIL.new("RGB", (width, height), "grey")
    buffer = io.BytesIO()
    picture.save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


SMALL = png(40, 30)


@tool
def plot() -> ToolOutput:
    """Draw the plot."""
    return ToolOutput("[image/png 40x30, sent to the model as an image] the plot", [model_image("image/png", SMALL)[0]])


@tool
def measure() -> str:
    """Measure it."""
    return "42 cm"


# -- the budget ----------------------------------------------------------------------------------------------------


def test_an_image_within_the_budget_goes_as_it_is_with_its_size():
    image, note = model_image("image/png", SMALL)
    assert image == {"media_type": "image/png", "data": SMALL, "width": 40, "height": 30}
    assert note == "sent to the model as an image"
    assert image_size("image/png", base64.b64decode(SMALL)) == (40, 30)


def test_a_large_image_is_downscaled_into_the_budget_and_the_note_says_how():
    big = png(1600, 1200, noise=True)
    assert len(base64.b64decode(big)) > 20 * MAX_IMAGE_BYTES
    image, note = model_image("image/png", big)
    assert image is not None
    raw = base64.b64decode(image["data"])
    assert len(raw) <= MAX_IMAGE_BYTES
    assert (image["width"], image["height"]) == image_size(image["media_type"], raw)
    assert image["width"] < 1600 and image["width"] / image["height"] == pytest.approx(4 / 3, rel=0.02)
    assert note.startswith(f"sent to the model as an image downscaled to {image['width']}x{image['height']}")
    assert note.endswith("to fit the 250 KB budget")


def test_a_smaller_budget_shrinks_further_and_one_too_small_for_any_image_sends_nothing():
    noise = png(800, 600, noise=True)
    size = f"{len(base64.b64decode(noise)) / 1000:,.0f} KB"
    image, note = model_image("image/png", noise, budget=40_000)
    assert image is not None and len(base64.b64decode(image["data"])) <= 40_000
    assert model_image("image/png", noise, budget=500) == (
        None, f"not sent to the model: {size} does not fit the 500 bytes budget even at 32 pixels")


def test_without_pillow_a_large_image_is_not_sent_and_the_note_says_why(monkeypatch: pytest.MonkeyPatch):
    noise = png(800, 600, noise=True)
    size = f"{len(base64.b64decode(noise)) / 1000:,.0f} KB"
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL now fails as if it were not installed
    assert model_image("image/png", noise) == (None, f"not sent to the model: {size} is over the 250 KB budget "
                                                     "for an image, and Pillow (to downscale it) is not installed")
    assert model_image("image/png", SMALL)[0] is not None  # a small one needs no Pillow


def test_svg_and_bad_data_are_not_sent():
    assert model_image("image/svg+xml", "<svg/>") == (
        None, "not sent to the model: it takes PNG, JPEG, GIF, WEBP")
    assert model_image("image/png", "not base64!") == (None, "not sent to the model: its data is not base64")


def test_a_reference_holds_type_size_bytes_and_a_hash_not_the_data():
    reference = image_reference(model_image("image/png", SMALL)[0])
    assert reference["media_type"] == "image/png" and (reference["width"], reference["height"]) == (40, 30)
    assert reference["bytes"] == len(base64.b64decode(SMALL)) and len(reference["sha256"]) == 64
    assert "data" not in reference


# -- a tool's images in the history and through the adapters --------------------------------------------------------


def test_a_tool_returning_tool_output_puts_its_images_on_the_output_item():
    result = asyncio.run(run("plot", model=ScriptedModel([[Call("plot"), Call("measure")], "ok"]),
                             tools=[plot, measure]))
    validate_history(result.history)
    plotted, measured = [item for item in result.history if item["type"] == "function_call_output"]
    assert plotted["output"].startswith("[image/png 40x30, sent to the model as an image]")
    assert plotted["images"] == [{"media_type": "image/png", "data": SMALL, "width": 40, "height": 30}]
    assert "images" not in measured  # a plain output has no images key
    assert result.partial_findings[0]["output"] == plotted["output"]


def test_responses_sends_an_output_with_images_as_input_text_then_input_image():
    calls = [("call_a", "plot", "{}"), ("call_b", "measure", "{}")]
    with ScriptedServer(Reply(responses_events([], calls)), Reply(responses_events(["seen"]))) as server:
        model = OpenAIResponsesModel("test-model", base_url=server.url, api_key=TEST_KEY)
        result = asyncio.run(run("plot", model=model, tools=[plot, measure]))
    assert result.status == "complete"
    outputs = [item for item in server.requests[1].body["input"] if item["type"] == "function_call_output"]
    assert outputs == [
        {"type": "function_call_output", "call_id": "call_a", "output": [
            {"type": "input_text", "text": "[image/png 40x30, sent to the model as an image] the plot"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{SMALL}"}]},
        {"type": "function_call_output", "call_id": "call_b", "output": "42 cm"},
    ]


def test_chat_sends_the_round_s_images_in_one_user_message_after_all_its_tool_messages():
    calls = [("call_a", "plot", ["{}"]), ("call_b", "measure", ["{}"]), ("call_c", "plot", ["{}"])]
    with ScriptedServer(Reply(chat_events([], calls)), Reply(chat_events(["seen"]))) as server:
        model = OpenAIChatModel("test-model", base_url=server.url, api_key=TEST_KEY)
        result = asyncio.run(run("plot", model=model, tools=[plot, measure]))
    assert result.status == "complete"
    messages = server.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "tool", "user"]
    assert [m["tool_call_id"] for m in messages[3:6]] == ["call_a", "call_b", "call_c"]
    assert all(isinstance(m["content"], str) for m in messages[3:6])
    url = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{SMALL}"}}
    assert messages[6]["content"] == [{"type": "text", "text": "The images of tool call call_a:"}, url,
                                      {"type": "text", "text": "The images of tool call call_c:"}, url]


def test_an_output_without_the_images_key_is_text_only_for_both_adapters():
    # The context view drops old images by handing the model a copy of the item without "images".
    with_images = {"type": "function_call_output", "call_id": "c", "output": "text",
                   "images": [{"media_type": "image/png", "data": SMALL}]}
    without = {k: v for k, v in with_images.items() if k != "images"}
    call = {"type": "function_call", "call_id": "c", "name": "plot", "arguments": "{}"}
    assert chat_messages("", [call, without])[-1] == {"role": "tool", "tool_call_id": "c", "content": "text"}
    from agentkernel.models.openai_responses import responses_item

    assert responses_item(without) == {"type": "function_call_output", "call_id": "c", "output": "text"}
    assert chat_messages("", [call, with_images])[-1]["role"] == "user"


def test_the_adapters_convert_an_output_with_images_once_not_per_request():
    for model in (OpenAIResponsesModel("m", api_key="x"), OpenAIChatModel("m", api_key="x")):
        cache = model._input if isinstance(model, OpenAIResponsesModel) else model._messages
        history = [{"type": "message", "role": "user", "content": "go"},
                   {"type": "function_call", "call_id": "c", "name": "plot", "arguments": "{}"},
                   {"type": "function_call_output", "call_id": "c", "output": "t",
                    "images": [{"media_type": "image/png", "data": SMALL}]}]
        first = cache.convert(history)
        history.append({"type": "message", "role": "assistant", "content": "seen"})
        second = cache.convert(history)
        assert all(a is b for a, b in zip(first, second, strict=False))  # the same converted dicts, not new ones
        assert len(second) == len(first) + 1


# -- cassette, transcript, and who gets images by default -------------------------------------------------------------


def test_a_cassette_records_a_reference_and_replays_the_run(tmp_path: Path):
    cassette = tmp_path / "plot.jsonl"
    asyncio.run(run("plot", model=RecordingModel(ScriptedModel([Call("plot"), "seen"]), cassette), tools=[plot]))
    text = cassette.read_text()
    assert SMALL not in text and '"sha256"' in text
    replay = ReplayModel(cassette)
    assert replay.accepts_images
    result = asyncio.run(run("plot", model=replay, tools=[plot]))
    assert (result.status, result.answer) == ("complete", "seen")

    @tool(name="plot")
    def plot_as_text() -> str:
        """Draw the plot."""
        return "[image/png 40x30, sent to the model as an image] the plot"

    result = asyncio.run(run("plot", model=ReplayModel(cassette), tools=[plot_as_text]))
    assert result.status == "fatal_error" and "the new input differs" in result.detail


def test_the_transcript_writes_references_and_loads_without_them(tmp_path: Path):
    path = tmp_path / "run.jsonl"
    asyncio.run(run("plot", model=ScriptedModel([Call("plot"), "seen"]), tools=[plot], transcript=path))
    text = path.read_text()
    assert SMALL not in text
    (item,) = [json.loads(line)["item"] for line in text.splitlines() if '"images"' in line]
    assert item["images"] == [image_reference(model_image("image/png", SMALL)[0])]
    history = load_transcript(path)
    validate_history(history)
    assert [i for i in history if "images" in i] == []


def test_images_by_default_for_the_openai_api_and_scripted_models_not_for_other_base_urls(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert accepts_images(OpenAIResponsesModel("gpt-4.1-mini"))
    assert accepts_images(OpenAIChatModel("gpt-4.1-mini", base_url="https://api.openai.com/v1/"))
    assert not accepts_images(OpenAIChatModel("local", base_url="http://127.0.0.1:8080/v1"))
    assert not accepts_images(RecordingModel(OpenAIResponsesModel("m", base_url="http://h/v1"), "x.jsonl"))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://proxy.example/v1")  # another server, even the environment's own
    assert not accepts_images(OpenAIResponsesModel("gpt-4.1-mini"))
    assert accepts_images(ScriptedModel(["hi"]))


def test_history_checks_and_redaction_leave_an_output_s_images_alone():
    from agentkernel.record.history import repair_history, valid_item
    from agentkernel.secrets import redact

    image = {"media_type": "image/png", "data": SMALL, "width": 40, "height": 30}
    item = {"type": "function_call_output", "call_id": "c", "output": "bad \ud800 text", "images": [image]}
    cleaned = valid_item(item)
    assert cleaned["output"] == "bad \ufffd text" and cleaned["images"] == [image]
    history = repair_history([{"type": "function_call", "call_id": "c", "name": "plot", "arguments": "{}"}, item])
    validate_history(history)
    assert history[1]["images"] == [image]
    assert redact(cleaned, ["sk-not-in-it-0123"])["images"] == [image]
