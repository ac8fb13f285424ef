"""Fault injection for run_python's displays: a display whose text holds the API key.

A matplotlib figure whose title is set from a variable holding the key, shown with its SVG beside the PNG (the
SVG keeps the title as text), an HTML, Markdown and JSON display of it, and a DataFrame value holding it: every
text part of every bundle is redacted before the panel shows it, the rendering below the run saves it, the
history and transcript keep it or the model is sent it. (The PNG's pixels are not text: a key drawn into a
figure is drawn for anyone who looks at it, the model included.)
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from kernel_client import KernelSession, agent_kernel

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

KEY = "sk-displaytest-0123456789abcdef"

CODE = """\
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import HTML, JSON, Markdown, display
%config InlineBackend.figure_formats = ["png", "svg"]
plt.rcParams["svg.fonttype"] = "none"
fig, ax = plt.subplots()
ax.plot([1, 3, 2])
ax.set_title(token)
display(fig)
display(HTML(f"<b>{token}</b>"), Markdown(f"**{token}**"), JSON({"token": token}))
plt.close(fig)
pd.DataFrame({"token": [token]})"""

SETUP = f"""\
import os
os.environ["OPENAI_API_KEY"] = {KEY!r}
token = os.environ["OPENAI_API_KEY"]
from agentkernel import Call, ScriptedModel
sent = []


def looker(request):
    sent.append(__import__("json").dumps(request.history))
    return Call("run_python", {{"code": {CODE!r}}}) if len(sent) == 1 else "done"


m = ScriptedModel(looker)
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory):
    with agent_kernel(tmp_path_factory.mktemp("faults_displays")) as ks:
        yield ks


def test_a_key_in_a_display_s_text_is_redacted_before_it_is_shown_saved_or_sent(kernel: KernelSession):
    kernel.ok(SETUP)
    cell = kernel.run("%%agent -m m --allow-writes\nplot it", timeout=60)
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("_agent.status") == "complete"
    # The displays did reach the panel and the cell (so this checks something): their text parts redacted. The
    # panel and the record show a display's figure only (no tool's HTML or Markdown is rendered).
    shown = json.dumps([m["content"] for m in cell.messages])
    assert "[secret $OPENAI_API_KEY]" in shown
    figures = [m for m in cell.of_type("comm_msg", "comm_open") if "data:image/png;base64," in json.dumps(m["content"])]
    assert figures, "the panel shows the figure"
    assert [mime for mime, _, _ in cell.record_images()] == ["image/png"]  # the record keeps one image a display
    inline = [base64.b64decode(data).decode("latin-1") for data in re.findall(r"base64,([A-Za-z0-9+/=]+)", shown)]
    assert KEY not in shown and not any(KEY in text for text in inline), "the key reached the notebook"
    # Nor did it reach the model (which got the figure as an image), the history or the transcript.
    requests = kernel.value("sent")
    assert len(requests) == 2 and "sent to the model as an image" in requests[1]
    assert KEY not in json.dumps(requests)
    assert KEY not in kernel.value("__import__('json').dumps(_agent.history)")
    assert KEY not in Path(kernel.value("_agent.transcript")).read_text()
