"""run_python's figures reach the model as images: ``%%agent`` in a real kernel, its model talking through the real
openai SDK to the loopback server in this process, whose request bodies the tests read.

Responses gets an ``input_image`` in the ``function_call_output``; Chat a user message with ``image_url`` parts
after the tool messages; within the byte budget; not at all with ``--no-images`` or for a base URL that did not
ask; recorded in a cassette (as a reference) that replays; kept in the transcript as a reference only.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from kernel_client import Cell, KernelSession, kernel_fixtures
from openai_server import Reply, ScriptedServer, chat_events, responses_events

from agentkernel.record.images import MAX_IMAGE_BYTES

pytest.importorskip("matplotlib")

RESET = """\
%reset -f
%autoawait True
%config AgentMagics.images = None
import os
for _name in ("CI", "AGENTKERNEL_NONINTERACTIVE", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTKERNEL_MODEL"):
    os.environ.pop(_name, None)
del _name
"""

PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('trend');"
BIG = """\
import io
import numpy as np
from PIL import Image as PILImage
from IPython.display import Image, display
buffer = io.BytesIO()
PILImage.fromarray(np.random.default_rng(0).integers(0, 255, (1200, 1600, 3), dtype=np.uint8)).save(buffer, "PNG")
display(Image(data=buffer.getvalue()))"""


session, kernel = kernel_fixtures("kernel_images", RESET)


def run_plot(kernel: KernelSession, options: str, code: str = PLOT, api: str = "responses") -> tuple[list[dict], Cell]:
    """A %%agent cell whose server model calls run_python(code) once, then answers: the bodies of its two requests,
    and the cell."""
    arguments = json.dumps({"code": code})
    if api == "chat":
        replies = [Reply(chat_events(calls=[("call_1", "run_python", [arguments])])), Reply(chat_events(["seen"]))]
    else:
        replies = [Reply(responses_events(calls=[("call_1", "run_python", arguments)])),
                   Reply(responses_events(["seen"]))]
    with ScriptedServer(*replies) as server:
        cell = kernel.run(f"%%agent --api {api} --base-url {server.url} -m small --allow-writes {options}\nplot it",
                          timeout=60)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.status") == "complete"
    assert len(server.requests) == 2
    return [r.body for r in server.requests], cell


def images_in(body: dict) -> list[str]:
    """Every data URL of an image anywhere in a request body."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str) and value.startswith("data:image/"):
            found.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(body)
    return found


def decoded(url: str) -> bytes:
    head, _, data = url.partition(",")
    assert head in ("data:image/png;base64", "data:image/jpeg;base64"), head
    return base64.b64decode(data)


def test_a_figure_arrives_as_an_input_image_in_the_next_responses_request(kernel: KernelSession):
    (first, second), _ = run_plot(kernel, "--images")
    assert images_in(first) == []
    (output,) = [item for item in second["input"] if item["type"] == "function_call_output"]
    assert output["call_id"] == "call_1"
    text, image = output["output"]
    assert text["type"] == "input_text" and "<Figure size 640x480 with 1 Axes>" in text["text"]
    assert ", sent to the model as an image]" in text["text"], text["text"]
    assert image["type"] == "input_image"
    png = decoded(image["image_url"])
    assert png.startswith(b"\x89PNG") and len(png) <= MAX_IMAGE_BYTES
    # The history keeps the image on the output item; the notebook's own copy is the one shown below the run.
    assert kernel.value("[i['images'][0]['media_type'] for i in _agent.history if 'images' in i]") == ["image/png"]


def test_chat_gets_the_figure_as_a_user_message_with_image_url_after_the_tool_message(kernel: KernelSession):
    messages = run_plot(kernel, "--images", api="chat")[0][1]["messages"]
    roles = [m["role"] for m in messages]
    assert roles[-3:] == ["assistant", "tool", "user"], roles
    tool_message, images = messages[-2:]
    assert isinstance(tool_message["content"], str) and "sent to the model as an image" in tool_message["content"]
    label, part = images["content"]
    assert label == {"type": "text", "text": "The images of tool call call_1:"}
    assert part["type"] == "image_url" and decoded(part["image_url"]["url"]).startswith(b"\x89PNG")


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_no_image_for_a_base_url_that_did_not_ask_nor_with_no_images(kernel: KernelSession, api: str):
    for options in ("", "--no-images"):
        second = run_plot(kernel, options, api=api)[0][1]
        assert images_in(second) == [] and "input_image" not in json.dumps(second)
        text = json.dumps(second)
        assert "[image/png " in text and "sent to the model" not in text  # the placeholder alone, as before
        assert kernel.value("[i for i in _agent.history if 'images' in i]") == []
    # %config turns it on for the cells after it; the command line still wins.
    kernel.ok("%config AgentMagics.images = True")
    assert len(images_in(run_plot(kernel, "", api=api)[0][1])) == 1
    assert images_in(run_plot(kernel, "--no-images", api=api)[0][1]) == []


def test_a_large_image_is_downscaled_to_the_byte_budget_and_the_text_says_so(kernel: KernelSession):
    (_, second), cell = run_plot(kernel, "--images", code=BIG)
    (output,) = [item for item in second["input"] if item["type"] == "function_call_output"]
    text, image = output["output"]
    assert "[image/png 1600x1200, sent to the model as an image downscaled to " in text["text"], text["text"]
    assert "to fit the 250 KB budget]" in text["text"]
    data = decoded(image["image_url"])
    assert len(data) <= MAX_IMAGE_BYTES
    # The notebook keeps the full image (5.8 MB of noise), below the run.
    (kept,) = [data for mime, data, _ in cell.record_images() if mime == "image/png"]
    assert len(base64.b64decode(kept)) > 20 * MAX_IMAGE_BYTES


def test_record_then_replay_a_run_with_a_figure(kernel: KernelSession, tmp_path: Path):
    cassette = tmp_path / "figure.jsonl"
    run_plot(kernel, f"--images --record {cassette}")
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    (reference,) = lines[1]["request"]["last"][0]["images"]
    assert reference["media_type"] == "image/png" and len(reference["sha256"]) == 64 and reference["bytes"] > 1000
    assert "data" not in reference and cassette.stat().st_size < 10_000  # a reference, not the image
    # Replayed with no server: the replay gives the model the image again (its cassette holds one) and matches.
    cell = kernel.run(f"%%agent --replay {cassette} --allow-writes\nplot it", timeout=60)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.answer") == "seen"
    assert kernel.value("[i['images'][0]['media_type'] for i in _agent.history if 'images' in i]") == ["image/png"]
    # Without the image, the replay notices that the model is not shown what it was shown when recorded.
    cell = kernel.run(f"%%agent --replay {cassette} --allow-writes --no-images\nplot it", timeout=60)
    assert kernel.value("_agent.status") == "fatal_error"
    assert "the new input differs" in kernel.value("_agent.detail")


def test_the_transcript_keeps_a_reference_to_the_image_not_its_data(kernel: KernelSession):
    run_plot(kernel, "--images")
    path = Path(kernel.value("_agent.transcript"))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    (item,) = [r["item"] for r in records if r.get("event") == "item" and "images" in r["item"]]
    (reference,) = item["images"]
    sent = kernel.value("[i['images'][0] for i in _agent.history if 'images' in i][0]")
    raw = base64.b64decode(sent["data"])
    assert reference == {"media_type": "image/png", "width": sent["width"], "height": sent["height"],
                         "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    assert sent["data"][:200] not in path.read_text()
    # Resuming from it: the history loads without the references (the text still says what the image was).
    kernel.ok(f"from agentkernel import load_transcript\nresumed = load_transcript({str(path)!r})")
    assert kernel.value("[i for i in resumed if 'images' in i]") == []


def test_a_call_sends_at_most_four_images_and_says_which_were_not_sent(kernel: KernelSession):
    code = "import matplotlib.pyplot as plt\nfor i in range(5):\n    plt.figure(figsize=(2, 2))\n    plt.plot([0, i])"
    (_, second), cell = run_plot(kernel, "--images", code=code)
    (output,) = [item for item in second["input"] if item["type"] == "function_call_output"]
    text, *images = output["output"]
    assert len(images) == 4 and all(i["type"] == "input_image" for i in images)
    assert text["text"].count(", sent to the model as an image]") == 4
    assert text["text"].count(", not sent to the model: one call sends at most 4 images]") == 1
    assert len(cell.record_images()) == 5  # the notebook keeps all five
