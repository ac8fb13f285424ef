"""``--price`` and ``--max-cost`` in a real kernel: a cost budget without a price fails the cell at once, naming
``--price``; with one the run is priced, capped and shown with its cost."""

from __future__ import annotations

import re

from kernel_client import KernelSession, kernel_fixtures, widget_state
from openai_server import Reply, ScriptedServer, chat_events, responses_events

RESET = """\
%reset -f
%autoawait True
%config AgentMagics.price = ''
from agentkernel import Call, ScriptedModel
m = ScriptedModel(["Hello there."])
"""

session, kernel = kernel_fixtures("magic_cost", RESET)


def test_max_cost_without_a_price_fails_the_cell_at_once_naming_price(kernel: KernelSession):
    cell = kernel.run("%%agent -m m --max-cost 0.01\nhello")
    assert cell.status == "error"
    (error,) = cell.errors
    assert error["ename"] == "AgentConfigError"
    assert re.search(r"--max-cost needs a price.*'scripted'.*give --price IN,OUT\[,CACHED_IN\]", error["evalue"])
    # a scripted model is looked up nowhere: the reason says so, not "at this URL"
    assert "(it is a model object that names no provider or URL" in error["evalue"], error["evalue"]
    assert cell.displays == []  # no panel: nothing ran
    # _agent holds the failed start: no request was made, and the message is kept
    assert kernel.value("[_agent.status, _agent.rounds, '--price' in _agent.detail]") == ["fatal_error", 0, True]


def test_a_bad_price_is_one_clear_line(kernel: KernelSession):
    cell = kernel.run("%%agent -m m --price 1,two\nhello")
    (error,) = cell.errors
    assert error["ename"] == "AgentConfigError" and "--price '1,two' is not a price" in error["evalue"]


def test_price_prices_the_run_and_the_cost_budget_stops_it(kernel: KernelSession):
    cell = kernel.run("%%agent -m m --price 1000,2000\nhello")
    assert cell.status == "ok", cell.describe()
    headline = cell.displays[-1]["text/plain"].splitlines()[0]
    assert re.fullmatch(r"agent: complete · 1 round · 0 tool calls · [\d,]+ in · [\d,]+ out · \$0\.\d{4}", headline)
    assert kernel.value("_agent.usage.cost") > 0
    assert kernel.value("_agent.summary").startswith("Answered after 1 round and 0 tool calls. Used ")

    kernel.ok("%config AgentMagics.price = '1000,2000'")
    kernel.ok("m = ScriptedModel([Call('nope', {'i': i}) for i in range(20)])")
    cell = kernel.run("%%agent -m m --tools '' --max-cost 0.5 --failure-rounds 0\nhello")
    (error,) = cell.errors
    assert error["ename"] == "HitCostCap" and error["evalue"].startswith("HIT_COST_CAP: spent $0.")
    assert kernel.value("_agent.status") == "hit_cost_cap" and kernel.value("_agent.usage.cost") <= 0.5


def test_a_priced_openai_run_shows_its_cached_tokens(kernel: KernelSession):
    reply = Reply(responses_events(["Hi."], usage=(4000, 10), cached=3072))
    with ScriptedServer(reply) as server:
        cell = kernel.run(f"%%agent --base-url {server.url} -m gpt-5-mini --price 0.25,2,0.025\nhello")
    assert cell.status == "ok", cell.describe()
    headline = cell.displays[-1]["text/plain"].splitlines()[0]
    cost = (928 * 0.25 + 3072 * 0.025 + 10 * 2) / 1e6
    assert headline.endswith(f"· 4,000 in (3,072 cached) · 10 out · ${cost:.4f}"), headline


def test_a_server_that_sends_no_usage_is_estimated_and_the_cell_says_so_in_words(kernel: KernelSession):
    text = " ".join(f"word{i}" for i in range(60))
    reply = Reply(chat_events([text], usage=None))  # a server that ignores include_usage
    with ScriptedServer(reply) as server:
        cell = kernel.run(f"%%agent --api chat --base-url {server.url} -m small --price 1,1 --max-cost 0.5\nhello")
    assert cell.status == "ok", cell.describe()
    note = "the response had no usable token count from the server; its tokens are estimated"
    assert cell.displays[-1]["text/plain"].splitlines()[0].endswith(f"· {note}")
    assert any(note in str(widget_state(m).get("value")) for m in cell.of_type("comm_open", "comm_msg"))  # the panel
    assert kernel.value("_agent.usage.estimated_requests") == 1 and kernel.value("_agent.usage.cost") > 0
    assert kernel.value(f"{note!r} in _agent.summary")

