"""``_agent`` holds markers: a secret the model wrote in its answer, its call arguments and code reaches no
display of the run's result in a real kernel — ``_agent`` shown as a cell's value (text/plain and text/html), its
``answer``, ``history`` and ``executed_code``, ``repr``, ``pprint``, the answer shown as Markdown — and a secret named
only after the run is shown as its marker by ``_agent``'s own displays.
"""

from __future__ import annotations

import json

from kernel_client import Cell, KernelSession, kernel_fixtures

TOKEN = "ghp_AgentMarkerTokenValue0123456789abcdefXY"
LATER = "hunter2-but-a-much-longer-database-password"
MARKER = "[secret $GITHUB_TOKEN]"

SETUP = f"""\
%reset -f
%config AgentMagics.transcripts = False
import os
os.environ["AGENTKERNEL_NONINTERACTIVE"] = "1"
os.environ["GITHUB_TOKEN"] = {TOKEN!r}
db_password = {LATER!r}
from agentkernel import Call, ScriptedModel, tool


@tool
def echo(text: str) -> str:
    \"\"\"Say it back.\"\"\"
    return "said"


leaky = ScriptedModel([Call("echo", {{"text": {TOKEN!r}}}),
                       "The token is {TOKEN} and the password is {LATER}.\\n\\n**{TOKEN}**"])
"""

session, kernel = kernel_fixtures("agent_markers", SETUP)


def everything(cell: Cell) -> str:
    return json.dumps([m["content"] for m in cell.messages], ensure_ascii=False)


def test_every_display_of_agent_shows_markers(kernel: KernelSession) -> None:
    run = kernel.run("%%agent -m leaky --tools echo\ngo")
    assert run.status == "ok", run.describe()
    assert TOKEN not in everything(run)
    shown = {
        "value": kernel.run("_agent"),
        "answer": kernel.run("_agent.answer"),
        "history": kernel.run("_agent.history"),
        "repr": kernel.run("print(repr(_agent))"),
        "pprint": kernel.run("import pprint\npprint.pprint(_agent)"),
        "markdown": kernel.run("from IPython.display import Markdown\nMarkdown(_agent.answer)"),
        "list": kernel.run("[_agent, _agent.answer]"),
    }
    for name, cell in shown.items():
        assert cell.status == "ok", cell.describe()
        text = everything(cell)
        assert TOKEN not in text and TOKEN[4:20] not in text, name
        assert MARKER in text or json.dumps(MARKER)[1:-1] in text, f"{name}: {text[:500]}"
    (value,) = [m["content"]["data"] for m in shown["value"].of_type("execute_result")]
    assert set(value) >= {"text/plain", "text/html"} and MARKER in value["text/plain"] and MARKER in value["text/html"]
    assert kernel.value("_agent.answer.count('[secret $GITHUB_TOKEN]')") == 2
    arguments = kernel.value("[i['arguments'] for i in _agent.history if i['type'] == 'function_call']")
    assert arguments == [json.dumps({"text": MARKER})]
    assert kernel.value("_agent.answer.split(' and ')[1]") == f"the password is {LATER}.\n\n**{MARKER}**"


def test_a_secret_named_after_the_run_is_a_marker_in_agents_displays(kernel: KernelSession) -> None:
    kernel.ok("%%agent -m leaky --tools echo\ngo")
    kernel.ok("%agent_secret db_password")
    for code in ("_agent", "print(repr(_agent.answer)[:0])\n_agent"):
        text = everything(kernel.run(code))
        assert LATER not in text and "[secret $db_password]" in text
