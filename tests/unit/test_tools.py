"""@tool schemas, parallel calls matched by call_id, malformed calls, timeouts, approval, worker threads."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import pydoc
import threading
import time
from typing import Annotated, Literal

import pytest
from pydantic import Field
from runtime_helpers import calls, output_of, outputs, run_sync

from agentkernel import Call, Decision, ScriptedModel, ToolCall, tool, validate_history
from agentkernel.events import ToolCallFinished, ToolCallStarted
from agentkernel.tools import as_registry, parse_arguments

# -- schemas --------------------------------------------------------------------------------------------------


def test_schema_from_signature_hints_defaults_and_docstring():
    @tool
    def search(
        pattern: str,
        path: str = ".",
        limit: int = 20,
        ratio: float = 0.5,
        ignore_case: bool = False,
        globs: list[str] | None = None,
        mode: Literal["regex", "fixed"] = "regex",
        depth: int | None = None,
        options: dict | None = None,
    ) -> list[str]:
        """Search files for a pattern.

        Only text files are searched.

        Args:
            pattern: The regular expression
                to look for.
            path (str): Where to start.
            limit: At most this many hits.
        """
        return []

    schema = search.schema()
    assert schema["type"] == "function"
    assert schema["name"] == "search"
    # Every paragraph before Args: is the description the model sees.
    assert schema["description"] == "Search files for a pattern.\n\nOnly text files are searched."
    params = schema["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["pattern"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert props["pattern"] == {"type": "string", "description": "The regular expression to look for."}
    assert props["path"] == {"type": "string", "description": "Where to start.", "default": "."}
    assert props["limit"] == {"type": "integer", "description": "At most this many hits.", "default": 20}
    assert props["ratio"] == {"type": "number", "default": 0.5}
    assert props["ignore_case"] == {"type": "boolean", "default": False}
    # Optional parameters are nullable (pydantic's schema: anyOf with null, default null).
    assert props["globs"] == {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                              "default": None}
    assert props["mode"] == {"enum": ["regex", "fixed"], "type": "string", "default": "regex"}
    assert props["depth"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    assert props["options"] == {"anyOf": [{"type": "object", "additionalProperties": True}, {"type": "null"}],
                                "default": None}
    assert search.read_only is True


def test_docstring_continuation_lines_that_look_like_entries_stay_with_their_argument():
    @tool
    def open_file(path: str, mode: str = "r") -> str:
        """Open a file.

        Args:
            path: Where the file is. Note:
                relative: paths are taken from the project root.
            mode: How to open it.

        Returns:
            The text.
        """
        return ""

    props = open_file.parameters["properties"]
    assert props["path"]["description"] == "Where the file is. Note: relative: paths are taken from the project root."
    assert props["mode"]["description"] == "How to open it."


def test_schema_name_override_and_undocumented_function():
    @tool(name="count_words", read_only=False, timeout=5)
    def wc(text):
        return len(text.split())

    assert wc.name == "count_words"
    assert wc.description == "wc"
    assert wc.parameters["properties"] == {"text": {}}
    assert wc.read_only is False and wc.timeout == 5
    assert wc("a b c") == 3  # a Tool is still callable as the function


def test_plain_functions_become_tools_and_duplicate_names_are_refused():
    def ping() -> str:
        return "pong"

    registry = as_registry([ping])
    assert registry["ping"].schema()["parameters"]["required"] == []
    with pytest.raises(ValueError, match="two tools"):
        as_registry([ping, tool(ping)])


def test_a_tool_behaves_like_the_function_it_wraps():
    def count(text: str, limit: int | None = None) -> int:
        """Count the words in a text."""
        return len(text.split()[:limit])

    wrapped = tool(count)
    assert wrapped("a b c") == 3 and wrapped("a b c", limit=2) == 2
    assert inspect.signature(wrapped) == inspect.signature(count)
    assert (wrapped.__name__, wrapped.__doc__, wrapped.__wrapped__) == ("count", count.__doc__, count)
    assert repr(wrapped) == "<tool count(text, limit=None) read-only>"
    assert repr(tool(read_only=False, name="wc")(count)) == "<tool wc(text, limit=None) side effects>"
    shown = pydoc.render_doc(wrapped, renderer=pydoc.plaintext)  # what help() prints
    assert "count(text: 'str', limit: 'int | None' = None) -> 'int'\n    Count the words in a text." in shown
    # Wrapping a tool again wraps its function, with the new options.
    again = tool(wrapped, read_only=False)
    assert again.fn is count and again.read_only is False


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_tuples_nested_models_and_constraints_get_proper_schemas_and_checks():
    @tool
    def place(cell: tuple[int, str], points: list[Point], size: Annotated[int, Field(ge=1)] = 1) -> str:
        """Place points."""
        return f"{cell} {points} {size}"

    props = place.parameters["properties"]
    assert props["cell"] == {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                             "minItems": 2, "maxItems": 2}
    assert props["points"]["items"] == {"$ref": "#/$defs/Point"}
    assert place.parameters["$defs"]["Point"]["properties"] == {"x": {"type": "integer"}, "y": {"type": "integer"}}
    assert props["size"] == {"type": "integer", "minimum": 1, "default": 1}
    # Arguments come to the function as its types say: a tuple, dataclass instances.
    assert parse_arguments(place, '{"cell": [1, "a"], "points": [{"x": 1, "y": 2}]}') == {
        "cell": (1, "a"), "points": [Point(1, 2)]}
    bad = {
        '{"cell": [1, 2], "points": []}': "argument 'cell[1]' must be of type string, got integer",
        '{"cell": [1, "a"], "points": [{"x": 1, "y": "2"}]}':
            "argument 'points[0].y' must be of type integer, got string",
        '{"cell": [1, "a"], "points": [], "size": 0}': "argument 'size' must be greater than or equal to 1",
        '{"cell": null, "points": []}': "argument 'cell' must be of type array, got null",
    }
    for arguments, message in bad.items():
        with pytest.raises(ValueError) as e:
            parse_arguments(place, arguments)
        assert str(e.value) == message


def test_null_for_a_required_string_is_refused_and_optional_parameters_take_null():
    @tool
    def find(path: str, depth: int | None = 3) -> str:
        """Find."""
        return f"{path} {depth}"

    with pytest.raises(ValueError, match="argument 'path' must be of type string, got null"):
        parse_arguments(find, '{"path": null}')
    assert parse_arguments(find, '{"path": "a", "depth": null}') == {"path": "a", "depth": None}
    # Only the arguments given are passed, so the function's own defaults apply to the rest.
    assert parse_arguments(find, '{"path": "a"}') == {"path": "a"}
    with pytest.raises(ValueError) as e:
        parse_arguments(find, '{"path": "a", "deep": 1, "max": 2}')
    assert str(e.value) == "unknown argument(s) deep, max; expected path, depth"


def test_unusual_parameter_names_and_types_pydantic_cannot_describe():
    class Handle:  # not a JSON type: the parameter takes any JSON value and the function gets it as given
        pass

    @tool
    def odd(schema: str, copy: int = 0, _private: bool = False, handle: Handle | None = None) -> str:
        """Parameters named like pydantic's own attributes."""
        return schema

    assert list(odd.parameters["properties"]) == ["schema", "copy", "_private", "handle"]
    assert odd.parameters["properties"]["handle"] == {"default": None}
    assert parse_arguments(odd, '{"schema": "s", "copy": 2, "_private": true, "handle": 5}') == {
        "schema": "s", "copy": 2, "_private": True, "handle": 5}


# -- parallel calls -------------------------------------------------------------------------------------------


@tool
async def wait_then(label: str, seconds: float) -> str:
    """Sleep, then return the label."""
    await asyncio.sleep(seconds)
    return f"{label} after {seconds}"


def test_parallel_calls_finishing_out_of_order_are_matched_by_call_id():
    sleeps = {"slowest": 0.3, "middle": 0.2, "fastest": 0.1}
    round_ = [Call("wait_then", {"label": k, "seconds": v}, call_id=f"id_{k}") for k, v in sleeps.items()]
    finished: list[str] = []

    def on_event(event):
        if isinstance(event, ToolCallFinished):
            finished.append(event.result.call_id)

    start = time.monotonic()
    result = run_sync("go", model=ScriptedModel([round_, "done"]), tools=[wait_then], on_event=on_event)
    elapsed = time.monotonic() - start

    assert result.status == "complete"
    assert finished == ["id_fastest", "id_middle", "id_slowest"]  # they finished out of request order...
    # ... but outputs are appended in request order and each matches its call.
    assert [o["call_id"] for o in outputs(result.history)] == ["id_slowest", "id_middle", "id_fastest"]
    for label, seconds in sleeps.items():
        assert output_of(result.history, f"id_{label}")["output"] == f"{label} after {seconds}"
    assert elapsed < 0.3 + 0.2  # ~ the longest sleep, not the sum (0.6)
    validate_history(result.history)


# -- malformed calls ------------------------------------------------------------------------------------------


@tool
def read_file(path: str, limit: int = 20) -> str:
    """Read a file."""
    return f"contents of {path}"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"path": "a.ts"', "error: bad arguments for read_file: arguments are not valid JSON"),
        ('["a.ts"]', "error: bad arguments for read_file: arguments must be a JSON object"),
        ('{"path": "a.ts", "lines": 3}', "error: bad arguments for read_file: unknown argument(s) lines"),
        ('{"limit": 3}', "error: bad arguments for read_file: missing required argument(s) path"),
        ('{"path": "a.ts", "limit": "3"}', "error: bad arguments for read_file: argument 'limit' must be of type"),
        ('{"path": 7}', "error: bad arguments for read_file: argument 'path' must be of type string"),
    ],
)
def test_malformed_arguments_give_a_model_visible_error_and_the_loop_goes_on(arguments, expected):
    script = [Call("read_file", arguments), Call("read_file", {"path": "b.ts"}), "done"]
    result = run_sync("go", model=ScriptedModel(script), tools=[read_file])
    assert result.status == "complete"
    first, second = outputs(result.history)
    assert first["output"].startswith(expected)
    assert second["output"] == "contents of b.ts"
    validate_history(result.history)


def test_unknown_tool_gives_a_model_visible_error():
    script = [Call("write_file", {"path": "a"}), "ok"]
    result = run_sync("go", model=ScriptedModel(script), tools=[read_file])
    assert result.status == "complete"
    assert outputs(result.history)[0]["output"] == "error: unknown tool 'write_file'; available: read_file"


def test_parse_arguments_enum_and_empty_string():
    @tool
    def pick(mode: Literal["a", "b"] = "a") -> str:
        return mode

    assert parse_arguments(pick, "") == {}
    assert parse_arguments(pick, '{"mode": "b"}') == {"mode": "b"}
    with pytest.raises(ValueError, match="must be one of"):
        parse_arguments(pick, '{"mode": "c"}')


# -- timeouts and failures ------------------------------------------------------------------------------------


def test_per_tool_timeout():
    @tool(timeout=0.1)
    async def hang() -> str:
        """Never answers in time."""
        await asyncio.sleep(10)
        return "late"

    start = time.monotonic()
    result = run_sync("go", model=ScriptedModel([Call("hang"), "gave up"]), tools=[hang])
    assert time.monotonic() - start < 1.0
    assert result.status == "complete"
    assert outputs(result.history)[0]["output"] == "error: hang timed out after 0.1 s"


def test_calls_in_one_round_each_time_out_after_their_own_timeout():
    # The run's calls share one timer (agentkernel.tools.timeouts): a shorter timeout that starts after a longer one
    # must still fire first.
    cut_after: dict[str, float] = {}

    def hanging(name: str, timeout: float):
        @tool(name=name, timeout=timeout)
        async def hang() -> str:
            """Never answers in time."""
            start = time.monotonic()
            try:
                await asyncio.sleep(10)
            finally:
                cut_after[name] = time.monotonic() - start
            return "late"

        return hang

    script = [[Call("patient"), Call("hasty")], "gave up"]
    result = run_sync("go", model=ScriptedModel(script), tools=[hanging("patient", 0.6), hanging("hasty", 0.1)])
    assert [o["output"] for o in outputs(result.history)] == [
        "error: patient timed out after 0.6 s", "error: hasty timed out after 0.1 s"]
    assert 0.1 <= cut_after["hasty"] < 0.4 and 0.6 <= cut_after["patient"] < 1.5, cut_after


@pytest.mark.parametrize("answer", ["returns", "raises"])
def test_a_tool_that_outlives_its_timeout_keeps_its_own_outcome_and_the_run_goes_on(answer: str):
    @tool(timeout=0.05)
    async def stubborn() -> str:
        """Catches the cancellation its timeout sends, then answers (or fails) on its own terms."""
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            if answer == "raises":
                raise ValueError("interrupted") from None
        return "finished anyway"

    @tool
    async def flaky() -> str:
        """Awaits a future that someone else cancels: its own failure, told apart only if the task is not
        left marked as being cancelled by the timeout before."""
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, future.cancel)
        return await future

    script = [Call("stubborn"), Call("flaky"), "done"]
    result = run_sync("go", model=ScriptedModel(script), tools=[stubborn, flaky])
    assert result.status == "complete", result.summary
    expected = "finished anyway" if answer == "returns" else "error: ValueError: interrupted"
    assert [o["output"] for o in outputs(result.history)] == [expected, "error: flaky was cancelled"]


def test_a_tool_that_raises_is_reported_to_the_model():
    @tool
    def explode(path: str) -> str:
        """Fails."""
        raise FileNotFoundError(f"no such file: {path}")

    result = run_sync("go", model=ScriptedModel([Call("explode", {"path": "x"}), "sorry"]), tools=[explode])
    assert result.status == "complete"
    assert outputs(result.history)[0]["output"] == "error: FileNotFoundError: no such file: x"
    assert result.partial_findings == []


def test_a_tool_that_raises_timeout_error_itself_is_not_reported_as_a_timeout():
    @tool(timeout=30)
    def connect() -> str:
        """Fails with its own TimeoutError."""
        raise TimeoutError("the server did not answer")

    result = run_sync("go", model=ScriptedModel([Call("connect"), "sorry"]), tools=[connect])
    assert outputs(result.history)[0]["output"] == "error: TimeoutError: the server did not answer"


def test_a_tool_whose_own_awaited_work_is_cancelled_fails_like_any_tool():
    @tool
    async def flaky() -> str:
        """Awaits a future that someone else cancels (the run itself is not being stopped)."""
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, future.cancel)
        return await future

    result = run_sync("go", model=ScriptedModel([Call("flaky"), "it failed"]), tools=[flaky])
    assert result.status == "complete"
    assert outputs(result.history)[0]["output"] == "error: flaky was cancelled"


def test_non_string_results_are_serialized():
    @tool
    def stats() -> dict:
        """Numbers."""
        return {"files": 3, "lines": 120}

    @tool
    def nothing() -> None:
        """Returns nothing."""

    result = run_sync("go", model=ScriptedModel([[Call("stats"), Call("nothing")], "ok"]), tools=[stats, nothing])
    assert [o["output"] for o in outputs(result.history)] == ['{"files": 3, "lines": 120}', "(no output)"]


# -- side effects and approval --------------------------------------------------------------------------------

written: list[str] = []


@tool(read_only=False)
def write_file(path: str, text: str) -> str:
    """Write a file."""
    written.append(path)
    return f"wrote {path}"


@pytest.fixture(autouse=True)
def _clear_written():
    written.clear()


def test_side_effecting_tool_is_denied_without_an_approver():
    result = run_sync("go", model=ScriptedModel([Call("write_file", {"path": "a", "text": "x"}), "ok"]),
                      tools=[write_file])
    assert written == []
    output = outputs(result.history)[0]["output"]
    assert output.startswith("denied: write_file has side effects")
    assert "no one is there to approve" in output
    assert result.status == "complete"


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("verdict", [True, False])
def test_side_effecting_tool_approved_or_denied_by_callback(use_async, verdict):
    asked: list[tuple[str, str]] = []

    def sync_approve(call: ToolCall, t) -> bool:
        asked.append((call.name, call.arguments))
        return verdict

    async def async_approve(call: ToolCall, t) -> bool:
        await asyncio.sleep(0.01)
        return sync_approve(call, t)

    script = [Call("write_file", {"path": "a", "text": "x"}), "ok"]
    result = run_sync("go", model=ScriptedModel(script), tools=[write_file],
                      approve=async_approve if use_async else sync_approve)
    assert asked == [("write_file", '{"path": "a", "text": "x"}')]
    output = outputs(result.history)[0]["output"]
    if verdict:
        assert written == ["a"] and output == "wrote a"
    else:
        assert written == [] and output == "denied: write_file has side effects and the user denied it"


def test_approve_for_the_run_skips_later_asks_for_that_tool_only_and_only_in_that_run():
    asked: list[str] = []

    @tool(read_only=False)
    def other(path: str) -> str:
        """Another side effect."""
        return f"other {path}"

    def approve(call: ToolCall, t) -> Decision | bool:
        asked.append(f"{call.name} {call.arguments}")
        return Decision(True, for_run=True) if call.name == "write_file" else True

    script = [Call("write_file", {"path": "a", "text": "x"}),
              [Call("write_file", {"path": "b", "text": "x"}), Call("other", {"path": "c"})],
              Call("write_file", {"path": "d", "text": "x"}), Call("other", {"path": "e"}), "ok"]
    result = run_sync("go", model=ScriptedModel(script), tools=[write_file, other], approve=approve)
    assert written == ["a", "b", "d"]  # every write ran, asked about once
    assert [o["output"] for o in outputs(result.history)] == ["wrote a", "wrote b", "other c", "wrote d", "other e"]
    assert asked == ['write_file {"path": "a", "text": "x"}', 'other {"path": "c"}', 'other {"path": "e"}']
    # The next run (a new cell, or --continue from this history) asks again.
    run_sync("again", model=ScriptedModel([Call("write_file", {"path": "f", "text": "x"}), "ok"]),
             tools=[write_file, other], approve=approve, history=result.history)
    assert asked[-1] == 'write_file {"path": "f", "text": "x"}' and len(asked) == 4


def test_a_plain_approving_decision_approves_this_call_only():
    asked: list[str] = []

    def approve(call: ToolCall, t) -> Decision:
        asked.append(call.arguments)
        return Decision(True)

    script = [Call("write_file", {"path": p, "text": "x"}) for p in "ab"] + ["ok"]
    run_sync("go", model=ScriptedModel(script), tools=[write_file], approve=approve)
    assert written == ["a", "b"] and len(asked) == 2


@pytest.mark.parametrize("use_async", [False, True])
def test_deny_with_a_note_sends_the_note_to_the_model_and_the_run_goes_on(use_async):
    seen: list[str] = []

    def model(request):
        done = [i["output"] for i in request.history if i["type"] == "function_call_output"]
        if not done:
            return Call("write_file", {"path": "data.csv", "text": "x"})
        seen.extend(done)
        return "I will read data.parquet instead."

    def deny(call, t):
        return Decision(False, note="  use the parquet file instead\n")

    async def deny_async(call, t):
        return deny(call, t)

    result = run_sync("go", model=ScriptedModel(model), tools=[write_file],
                      approve=deny_async if use_async else deny)
    assert written == []
    assert seen == ["denied by the user: use the parquet file instead"]  # what the model was sent, stripped
    assert result.status == "complete" and result.answer == "I will read data.parquet instead."


def test_a_denial_without_a_note_reads_as_a_plain_denial():
    result = run_sync("go", model=ScriptedModel([Call("write_file", {"path": "a", "text": "x"}), "ok"]),
                      tools=[write_file], approve=lambda call, t: Decision(False, note="  "))
    assert outputs(result.history)[0]["output"] == "denied: write_file has side effects and the user denied it"


def test_read_only_tools_are_never_sent_to_the_approver():
    def approve(call, t):
        raise AssertionError("asked about a read-only tool")

    result = run_sync("go", model=ScriptedModel([Call("read_file", {"path": "a"}), "ok"]), tools=[read_file],
                      approve=approve)
    assert outputs(result.history)[0]["output"] == "contents of a"


def test_side_effecting_tool_runs_alone():
    active: set[str] = set()
    overlaps: list[tuple[str, frozenset[str]]] = []

    def enter(name: str) -> None:
        if active:
            overlaps.append((name, frozenset(active)))
        active.add(name)

    @tool
    async def look(path: str) -> str:
        """Read-only."""
        enter(f"look {path}")
        await asyncio.sleep(0.05)
        active.discard(f"look {path}")
        return "seen"

    @tool(read_only=False)
    async def change(path: str) -> str:
        """Side effect."""
        enter(f"change {path}")
        await asyncio.sleep(0.05)
        active.discard(f"change {path}")
        return "changed"

    round_ = [Call("look", {"path": "a"}), Call("change", {"path": "b"}), Call("look", {"path": "c"}),
              Call("change", {"path": "d"})]
    result = run_sync("go", model=ScriptedModel([round_, "ok"]), tools=[look, change], approve=lambda c, t: True)
    # The two looks overlap each other, never a change; the changes never overlap anything.
    assert all(name.startswith("look") and all(o.startswith("look") for o in others) for name, others in overlaps)
    assert len(overlaps) == 1
    assert [o["output"] for o in outputs(result.history)] == ["seen", "changed", "seen", "changed"]
    assert [o["call_id"] for o in outputs(result.history)] == [c["call_id"] for c in calls(result.history)]


# -- worker threads -------------------------------------------------------------------------------------------

cell = contextvars.ContextVar("cell", default="none")


def test_sync_tool_runs_in_a_worker_thread_with_the_callers_context(capsys):
    seen: dict[str, object] = {}

    @tool
    def where() -> str:
        """Report the thread and the context."""
        seen["thread"] = threading.current_thread()
        seen["cell"] = cell.get()
        print("printed from the tool")
        return "here"

    async def main():
        cell.set("cell-42")
        from agentkernel import run

        return await run("go", model=ScriptedModel([Call("where"), "ok"]), tools=[where])

    result = asyncio.run(main())
    assert result.status == "complete"
    assert seen["thread"] is not threading.main_thread()
    assert seen["cell"] == "cell-42"
    assert "printed from the tool" in capsys.readouterr().out


def test_tool_call_events_bracket_each_call():
    events: list[tuple[str, str, str | None]] = []

    def on_event(event):
        if isinstance(event, ToolCallStarted):
            events.append(("ToolCallStarted", event.call.call_id, None))
        elif isinstance(event, ToolCallFinished):
            events.append(("ToolCallFinished", event.result.call_id, event.result.status))

    run_sync("go", model=ScriptedModel([[Call("read_file", {"path": "a"}, call_id="c1")], "ok"]),
             tools=[read_file], on_event=on_event)
    assert events == [("ToolCallStarted", "c1", None), ("ToolCallFinished", "c1", "ok")]


def test_a_parameter_whose_annotation_cannot_be_resolved_takes_any_value_and_the_others_keep_their_types():
    class Local:  # with `from __future__ import annotations` this name cannot be resolved from the module
        pass

    @tool
    def f(n: int, thing: Local | None = None) -> str:
        """F."""
        return str(n)

    assert f.parameters["properties"]["n"] == {"type": "integer"}
    assert f.parameters["properties"]["thing"] == {"default": None}
    with pytest.raises(ValueError, match="argument 'n' must be of type integer"):
        parse_arguments(f, '{"n": "1"}')
