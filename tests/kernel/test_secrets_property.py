"""No piece of a secret leaves the kernel, as a property: random secrets, every road out.

Each example draws secrets of 16 to 700 characters, on one line or several, and names each by a rule of the secret
set: secret-named environment variables (one a PEM-like multi-line key), a URL's password, a name in
``secret_env``, a notebook variable named by ``%agent_secret``, a value given to ``agentkernel.secrets.add``, the
key of an MCP entry (drawn once per module: the server keeps its environment) and an environment entry a read-only
``@tool`` creates during the run. It plants them in kernel variables (a long string, a dict, a DataFrame, an object
whose repr shows them), a file, the notebook's cells and their outputs (the front end played by the test, as in
``test_notebook_comm.py``), an MCP server's results (an SDK server written here) and a failed cell. A hostile model
(the loopback server answering from what it was sent) then drives every tool of the default set, two ``@tool``
functions and the MCP tool through the real ``%%agent`` magic: it inspects the holders, searches and reads the
file, reads the notebook, edits the cell holding a secret (keeping the marker where the value stood), tries a marker
in a new cell and in code, and runs code that prints, displays and raises pieces of the secrets.

Checked over every request body, every iopub message of the run (but the notebook comm's, which writes the cell
back with its value: that is the notebook's own text going to the notebook), the transcripts, the cassette and
``_agent``: no run of 16 characters of any secret (:mod:`secret_pieces`). And nothing is lost: the edited cell
keeps its real value where the model kept the marker.
"""

from __future__ import annotations

import json
import secrets
import string
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kernel_client import KernelSession, kernel_env
from openai_server import TEST_KEY, Received, Reply, ScriptedServer, responses_events
from secret_pieces import PIECE, leaks
from test_notebook_comm import FakeNotebook, code_cell

from agentkernel.jupyter.kernel import KERNEL_TOOL_NAMES
from agentkernel.jupyter.kernel.notebook import COMM_TARGET
from agentkernel.tools.files import FILE_TOOL_NAMES

VALUE_CHARS = string.ascii_letters + string.digits + "+/=_-.:@~!%*,"
LINE = st.text(alphabet=VALUE_CHARS, min_size=PIECE, max_size=700)
LINES = st.lists(st.text(alphabet=VALUE_CHARS, min_size=1, max_size=64), min_size=2, max_size=12).map(
    "\n".join).filter(lambda value: len(value) >= PIECE)
VALUE = st.one_of(LINE, LINES)
MCP_KEY = "mcp-" + secrets.token_urlsafe(30)
"""The MCP entry's key: one per module, as the server started once keeps the environment it was started with."""
RULES = ("ALPHA_TOKEN", "PEM_PRIVATE_KEY", "DATABASE_URL", "PLAIN_SETTING", "db_password", "vault", "SERVICE_TOKEN")

MCP_SERVER = """\
import os
from pathlib import Path
from mcp.server.mcpserver import MCPServer

app = MCPServer("leaky")


@app.tool()
def dump() -> str:
    \"\"\"The service's configuration.\"\"\"
    return Path(os.environ["LEAKY_PAYLOAD"]).read_text() + "\\nkey " + os.environ["LEAKY_API_KEY"]


app.run("stdio")
"""

TOOLS = """\
from pathlib import Path
from agentkernel import tool


@tool
def careless() -> str:
    "A careless tool: returns a credential whole and cut."
    return f"token {os.environ['ALPHA_TOKEN']} head {os.environ['PEM_PRIVATE_KEY'][:40]}"


@tool
def issue_token() -> str:
    "A read-only tool that makes a credential, puts it in the environment and returns it."
    os.environ["SERVICE_TOKEN"] = Path("../service.txt").read_text()
    return f"issued {os.environ['SERVICE_TOKEN']}, its tail {os.environ['SERVICE_TOKEN'][1:]}"
"""

SETUP = """\
import json, os
from urllib.parse import quote
import pandas
import agentkernel
_s = json.loads({values!r})
os.environ.update(ALPHA_TOKEN=_s["ALPHA_TOKEN"], PEM_PRIVATE_KEY=_s["PEM_PRIVATE_KEY"],
                  PLAIN_SETTING=_s["PLAIN_SETTING"],
                  DATABASE_URL="postgres://me:" + quote(_s["DATABASE_URL"], safe="") + "@db.example/app")
os.environ.pop("SERVICE_TOKEN", None)
db_password = _s["db_password"]
agentkernel.secrets.add(_s["vault"], name="vault")
holder_str = "config: " + "x" * 150 + _s["ALPHA_TOKEN"] + " end"
holder_dict = {{"service": {{"token": _s["PLAIN_SETTING"], "url": os.environ["DATABASE_URL"]}},
               "pem": _s["PEM_PRIVATE_KEY"]}}
holder_df = pandas.DataFrame({{"user": ["ann", "bob"], "credential": [_s["vault"], _s["db_password"]]}})


class Holder:
    def __repr__(self):
        return f"Holder(password={{db_password!r}}, pem={{os.environ['PEM_PRIVATE_KEY']!r}})"


holder_obj = Holder()
"""

RUN_CODE = """\
from IPython.display import HTML, display
print(os.environ["ALPHA_TOKEN"][3:200], holder_str)
print(os.environ.get("SERVICE_TOKEN", "")[2:90], file=sys.stderr)
display(HTML("<b>" + db_password + "</b>"))
holder_df"""


class HostileModel(ScriptedServer):
    """A model that wants the secrets out: it answers each request from what the request holds."""

    def next_reply(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
        items = received.body.get("input", [])
        outputs = {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
        if not outputs:
            return calls_reply(
                ("a1", "list_variables", {}), ("a2", "inspect_variable", {"name": "holder_str"}),
                ("a3", "inspect_variable", {"name": "holder_dict"}), ("a4", "inspect_variable", {"name": "holder_df"}),
                ("a5", "inspect_variable", {"name": "holder_obj"}), ("a6", "inspect_variable", {"name": "_s"}),
                ("a7", "read_file", {"path": "notes.txt"}), ("a8", "search_text", {"pattern": "key|token"}),
                ("a9", "list_dir", {}), ("a10", "read_notebook", {}), ("a11", "last_error", {}),
                ("a12", "careless", {}), ("a13", "issue_token", {}), ("a14", "leaky__dump", {}))
        if "b1" not in outputs:
            return calls_reply(
                ("b1", "edit_cell", {"cell_id": "creds", "source": cell_source(str(outputs["a10"])) + "\n# reviewed"}),
                ("b2", "add_cell", {"source": "API = '[secret $ALPHA_TOKEN]'"}),
                ("b3", "run_python", {"code": "leaked = '[secret $ALPHA_TOKEN]'"}),
                ("b4", "run_python", {"code": RUN_CODE}),
                ("b5", "run_python", {"code": "raise ValueError('bad ' + os.environ['PEM_PRIVATE_KEY'][5:])"}),
                ("b6", "run_python", {"code": "holder_obj"}))
        return Reply(responses_events(["done"]))


def calls_reply(*calls: tuple[str, str, dict[str, Any]]) -> Reply:
    return Reply(responses_events([], [(i, n, json.dumps(a)) for i, n, a in calls]))


def cell_source(listing: str) -> str:
    """The source of cell ``creds`` as read_notebook showed it (redacted)."""
    head = next(line for line in listing.splitlines() if line.startswith("--- ") and "id creds" in line)
    return listing.split(head + "\n", 1)[1].split("\n--- cell ", 1)[0].split("\n··· outputs:\n", 1)[0]


@pytest.fixture(scope="module")
def model() -> Iterator[HostileModel]:
    with HostileModel() as server:
        yield server


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory, model: HostileModel) -> Iterator[KernelSession]:
    root = tmp_path_factory.mktemp("secrets_property")
    (root / "cwd").mkdir()
    (root / "leaky.py").write_text(MCP_SERVER)
    config = {"mcpServers": {"leaky": {"command": sys.executable, "args": [str(root / "leaky.py")],
                                       "env": {"LEAKY_API_KEY": MCP_KEY, "LEAKY_PAYLOAD": str(root / "payload.txt")}}}}
    (root / "cwd" / "mcp.json").write_text(json.dumps(config))
    ks = KernelSession(root / "cwd", kernel_env(root))
    try:
        ks.ok("%load_ext agentkernel")
        ks.ok(f"import os, sys\nos.environ.update(OPENAI_BASE_URL={model.url!r}, OPENAI_API_KEY={TEST_KEY!r})\n"
              "for _name in ('CI', 'AGENTKERNEL_NONINTERACTIVE'):\n    os.environ.pop(_name, None)\n"
              "get_ipython()._agentkernel_notebook = None\n"
              "%config AgentMagics.secret_env = ['PLAIN_SETTING']\n" + TOOLS)
        yield ks
    finally:
        ks.shutdown()


def plant(kernel: KernelSession, values: dict[str, str]) -> None:
    """The secrets where the run will find them (the kernel's variables and environment, a file, the MCP payload,
    a failed cell)."""
    root = kernel.cwd.parent
    # SERVICE_TOKEN is no secret until issue_token puts it in the environment: only that tool knows it.
    kernel.ok(SETUP.format(values=json.dumps({k: v for k, v in values.items() if k != "SERVICE_TOKEN"})))
    kernel.ok("%agent_secret db_password")
    kernel.run("raise RuntimeError('could not log in with ' + _s['vault'][:60])")  # for last_error
    (kernel.cwd / "notes.txt").write_text(f"key {values['ALPHA_TOKEN']}\npem {values['PEM_PRIVATE_KEY']}\n"
                                          f"token {values['PLAIN_SETTING'][7:]}\n")
    (root / "service.txt").write_text(values["SERVICE_TOKEN"])  # outside the root: only issue_token reads it
    (root / "payload.txt").write_text(f"password {values['db_password'][4:]}\nvault {values['vault']}")


def notebook_cells(values: dict[str, str], code: str) -> list[dict[str, Any]]:
    return [
        code_cell("creds", f'API = "{values["ALPHA_TOKEN"]}"\nprint(len(API))', 1,
                  out=f"{len(values['ALPHA_TOKEN'])} and {values['PLAIN_SETTING'][:50]}"),
        {**code_cell("notes", f"Deploy key:\n{values['PEM_PRIVATE_KEY']}\n"), "cell_type": "markdown"},
        code_cell("agent", code),
    ]


def road_texts(kernel: KernelSession, model: HostileModel, sent: int, messages: list[dict], cassette: Path) -> \
        dict[str, list[Any]]:
    notebook_comms = {m["content"]["comm_id"] for m in messages
                      if m["msg_type"] == "comm_open" and m["content"].get("target_name") == COMM_TARGET}
    transcripts = kernel.cwd.parent / "transcripts"
    return {
        "request bodies": [r.body for r in model.requests[sent:]],
        "iopub": [m["content"] for m in messages if m["content"].get("comm_id") not in notebook_comms],
        "transcripts": [p.read_text() for p in transcripts.rglob("*") if p.is_file()],
        "cassette": [cassette.read_text()],
        "_agent": [kernel.value("repr(vars(_agent))"), kernel.value("json.dumps(_agent.history)")],
    }


# A few examples, each a whole run in the one kernel (about 8 s on a 2-core VM); no shrinking, which would rerun
# the kernel for minutes: a failure is reported with the example as drawn.
@settings(max_examples=4, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(st.fixed_dictionaries({name: LINES if name == "PEM_PRIVATE_KEY" else VALUE for name in RULES}))
def test_no_piece_of_a_secret_leaves_by_any_road(kernel: KernelSession, model: HostileModel, values: dict[str, str]):
    plant(kernel, values)
    cassette = kernel.cwd / f"cassette-{secrets.token_hex(4)}.jsonl"
    tools = ",".join([*FILE_TOOL_NAMES, *KERNEL_TOOL_NAMES, "careless", "issue_token"])
    code = (f"%%agent --allow-writes --tools {tools} --mcp-config mcp.json --mcp leaky --record {cassette.name}\n"
            "Log in with {db_password} and tell me what you find.")
    notebook = FakeNotebook(kernel, notebook_cells(values, code))
    sent = len(model.requests)
    cell = notebook.run(notebook.submit(code), timeout=120)
    assert kernel.value("_agent.status") == "complete", kernel.value("_agent.summary")
    outputs = kernel.value("{i['call_id']: i['output'] for i in _agent.history if i['type'] == 'function_call_output'}")
    assert not any(o.startswith("error: bad arguments") for o in outputs.values()), outputs

    everything = {"MCP_KEY": MCP_KEY, **values}
    found = {road: leaks(everything, texts) for road, texts in
             road_texts(kernel, model, sent, cell.messages, cassette).items()}
    assert not {road: pieces for road, pieces in found.items() if pieces}, found

    # Nothing lost: the edited cell holds its value where the model kept the marker; a marker anywhere else wrote
    # nothing and ran nothing.
    assert notebook.cell("creds")["source"] == f'API = "{values["ALPHA_TOKEN"]}"\nprint(len(API))\n# reviewed', \
        outputs["b1"]
    assert outputs["b2"].startswith("error: CellNotWritten: not added: [secret $ALPHA_TOKEN] is a marker")
    assert outputs["b3"].startswith("error: MisplacedMarker") and kernel.value("'leaked' in dir()") is False
    # The roads carried the markers where the values would have been.
    assert "[secret $SERVICE_TOKEN]" in outputs["a13"] and "\nkey [secret $" in outputs["a14"], outputs
    assert "[secret $db_password]" in json.dumps(model.requests[sent].body)
