"""The log of a run's notebook changes (agentkernel/jupyter/kernel/undo.py) against any answer a front end may give
to ``restore``, a lying or broken one included: the log keeps exactly the cells not taken back, and the one line
names exactly the cells left because they changed. The kernel-level twin is tests/kernel/test_agent_undo.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentkernel.jupyter.kernel.undo import MAX_RUNS, UNDO_MIME, ChangeLog, RunChanges, _outcome

IDS = st.sampled_from(["a", "b", "c", "d", "zz", ""])


def run_of(added: list[str], edited: list[str]) -> RunChanges:
    run = RunChanges("r1")
    for cell_id in added:
        run.added(cell_id, "code", f"added {cell_id}\nsecond line", "call")
    for cell_id in edited:
        run.edited(cell_id, "code", "old", f"new {cell_id}", "call", {"old_source": "old", "old_execution_count": 3})
    return run


answers = st.fixed_dictionaries({
    "removed": st.one_of(st.lists(IDS), st.none(), st.text(max_size=3)),
    "restored": st.one_of(st.lists(IDS), st.none(), st.integers()),
    "missing": st.one_of(st.lists(IDS), st.none()),
    "changed": st.one_of(st.lists(st.one_of(st.fixed_dictionaries({"cell_id": IDS, "source": st.text(max_size=50)}),
                                            st.text(max_size=3), st.none())), st.none(), st.text(max_size=3)),
})


@given(st.lists(IDS, unique=True), st.lists(IDS, unique=True), answers)
def test_the_log_keeps_what_was_not_taken_back_and_the_line_names_what_changed(added: list[str], edited: list[str],
                                                                               reply: dict[str, Any]) -> None:
    run = run_of(added, [i for i in edited if i not in added])
    before = set(run.cells)
    line = _outcome(run, reply)

    def listed(key: str) -> set[str]:
        value = reply[key]
        return {str(i) for i in value} if isinstance(value, list) else set()

    assert "\n" not in line  # one line, whatever the sources hold
    if before and listed("missing") == before:  # none of its cells is in this notebook: the run is left undoable
        assert set(run.cells) == before and line.startswith(f"did not undo run {run.run_id}: ")
        return
    assert set(run.cells) == before - listed("removed") - listed("restored") - listed("missing")
    named = {str(item["cell_id"]) for item in reply["changed"] or [] if isinstance(item, dict)} & set(run.cells) \
        if isinstance(reply["changed"], list) else set()
    assert line.startswith(f"undid run {run.run_id}: ") == (not named)
    for cell_id in named:
        assert f"cell {cell_id} (" in line


def test_an_edited_cell_keeps_what_it_was_before_the_runs_first_edit() -> None:
    run = RunChanges("r1")
    run.edited("c", "code", "v0", "v1", "call_1", {"old_source": "v0", "old_execution_count": 7,
                                                    "old_metadata": {"agentkernel": None}})
    run.edited("c", "code", "v1", "v2", "call_2", {"old_source": "v1", "old_execution_count": None})
    run.added("n", "markdown", "## New", "call_3")
    run.edited("n", "markdown", "## New", "## Newer", "call_4", {"old_source": "## New"})
    assert [change.restore() for change in run.cells.values()] == [
        {"cell_id": "c", "expected_source": "v2", "source": "v0", "execution_count": 7,
         "metadata": {"agentkernel": None}},
        {"cell_id": "n", "expected_source": "## Newer", "source": None},  # added: removed, whatever it became
    ]
    assert run.summary() == "2 cells: 1 added, 1 edited"
    assert run.output().data["text/plain"] == ("this run changed 2 cells: 1 added, 1 edited; while this kernel runs, "
                                               "%agent_undo takes back the newest run, %agent_undo RUN_ID this one "
                                               "(_agent.run_id)")
    assert run.output().metadata == {UNDO_MIME: {"run_id": "r1"}}


def test_the_default_is_the_newest_run_with_changes_left_and_the_log_is_bounded() -> None:
    class Shell:
        pass

    log = ChangeLog.of(Shell())
    assert isinstance(log.find(), str)
    for n in range(MAX_RUNS + 5):
        log.run(f"r{n}").added(f"c{n}", "code", "x", "call")
    assert len(log.runs) == MAX_RUNS and next(iter(log.runs)) == "r5"
    log.runs[f"r{MAX_RUNS + 4}"].cells.clear()
    assert getattr(log.find(), "run_id", None) == f"r{MAX_RUNS + 3}"
    assert log.find(f"r{MAX_RUNS + 4}") == f"nothing left to undo of run r{MAX_RUNS + 4}"
    assert str(log.find("r0")).startswith("nothing to undo: run r0 did not change the notebook from this kernel")


def test_a_line_names_a_cell_without_its_secrets() -> None:
    run = RunChanges("r1")
    key = "sk-proj-" + "abcdefghij" * 4
    run.added("c", "code", f"client = make('{key}')", "call")
    line = _outcome(run, {"changed": [{"cell_id": "c", "source": f"client = make('{key}')  # mine"}]})
    assert line.startswith("did not undo run r1: left as they are") and "cell c (client = make('" in line
    assert "abcdefghij" not in line
