"""The namespace journal (agentkernel/journal.py): random runs of bind / rebind / delete / in-place changes on lists,
dicts, sets, DataFrames and arrays over several calls, then undo, give back the namespace from before the run (the
same objects, their old contents), except the names the user changed since, which are left and named; and the
budget, the uncopyable, the code that reaches names dynamically, the notebook's functions that reach globals. The
kernel-level twin is tests/kernel/test_undo_namespace.py."""

from __future__ import annotations

import copy
import io
import threading
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkernel.journal import MISSING, Journal, Journals, estimate_size, fingerprint, reach

warnings.filterwarnings("ignore", message=".*inplace keyword.*")

KINDS = ["list", "dict", "set", "frame", "array", "int", "flat list", "flat dict"]


def make(kind: str, seed: int) -> Any:
    if kind == "list":
        return [seed, [seed + 1], "x"]
    if kind == "flat list":  # scalars only: copied by the shallow road
        return [seed, -0.0, 1.5, "x", None]
    if kind == "flat dict":
        return {"k": seed, "f": 0.5}
    if kind == "dict":
        return {"k": seed, "nested": [seed]}
    if kind == "set":
        return {seed, seed + 1}
    if kind == "frame":
        return pd.DataFrame({"a": [seed, seed + 1, seed + 2], "b": [0.5, np.nan, 2.0]})
    if kind == "array":
        return np.arange(seed, seed + 6, dtype=float)
    return seed


IN_PLACE = {
    list: ["{n}.append({i})", "{n}[-1].append({i}) if {n} and isinstance({n}[-1], list) else {n}.append(0)",
           "{n}.clear()",
           "{n}.reverse()"],
    dict: ["{n}['k'] = {i}", "{n}.pop('k', None)", "{n}['nested'] = {n}.get('nested', []) + [{i}]", "{n}.clear()"],
    set: ["{n}.add({i})", "{n}.discard(min({n}, default=0))", "{n}.clear()"],
    pd.DataFrame: ["{n}['c'] = {i}", "{n}.drop(columns=[{n}.columns[0]], inplace=True)",
                   "{n}.iloc[0, 0] = {i}", "{n}.rename(columns=str.upper, inplace=True)",
                   "{n}.sort_values({n}.columns[0], ascending=False, inplace=True)" ],
    np.ndarray: ["{n}[0] = {i}", "{n} += 1", "{n}[:] = 0", "{n}.sort()"],
}


USER_CHANGES = {
    list: lambda v: v.append("user"),
    dict: lambda v: v.__setitem__("user", 1),
    set: lambda v: v.add("user"),
    pd.DataFrame: lambda v: v.__setitem__("user", 1),
    np.ndarray: lambda v: v.__setitem__(..., -7.5),
}
"""What the user does to a variable in place after the run."""


def equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, pd.DataFrame):
        return a.equals(b) and list(a.columns) == list(b.columns) and list(a.index) == list(b.index)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return bool(a == b)


def run_code(journal: Journal, namespace: dict[str, Any], code: str) -> None:
    call = journal.before(namespace, code)
    exec(code, namespace)
    journal.after_call(namespace, call)
    assert_kept_counts_the_copies(journal.owner)


def user_names(namespace: dict[str, Any]) -> list[str]:
    return sorted(name for name in namespace if not name.startswith("_") and name not in ("np", "pd"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_undo_gives_back_the_namespace_from_before_the_run_except_what_the_user_changed_since(data: Any) -> None:
    kinds = data.draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=5))
    namespace: dict[str, Any] = {"__name__": "__main__", "np": np, "pd": pd}
    for i, kind in enumerate(kinds):
        namespace[f"v{i}"] = make(kind, i)
    before = {name: namespace[name] for name in user_names(namespace)}
    contents = {name: copy.deepcopy(value) for name, value in before.items()}
    journal = Journals().run("run")
    counter = 100
    for _ in range(data.draw(st.integers(1, 4), label="calls")):
        lines = []
        # a copy to pick names that exist when each line runs
        scratch = {name: value if name in ("np", "pd") else copy.deepcopy(value) for name, value in namespace.items()
                   if not name.startswith("_")}
        for _ in range(data.draw(st.integers(1, 4), label="lines")):
            counter += 1
            names = user_names(scratch)
            action = data.draw(st.sampled_from(["bind", "rebind", "delete", "in place", "in place"]) if names
                               else st.just("bind"))
            if action == "bind":
                line = f"n{counter} = {data.draw(st.sampled_from(['[1]', '{1: 2}', '{3}', 'np.ones(2)', '7']))}"
            else:
                name = data.draw(st.sampled_from(names))
                ops = IN_PLACE.get(type(scratch[name]))
                if action == "rebind":
                    line = f"{name} = {data.draw(st.sampled_from(['[0]', name + ' * 1 if False else 5', 'None']))}"
                elif action == "delete":
                    line = f"del {name}"
                elif ops is not None and not (isinstance(scratch[name], pd.DataFrame) and scratch[name].shape[1] < 2):
                    line = data.draw(st.sampled_from(ops)).format(n=name, i=counter)
                else:
                    continue
            exec(line, scratch)
            lines.append(line)
        if lines:
            run_code(journal, namespace, "\n".join(lines))
    changed_by_run = set(journal.bindings) | set(journal.after)
    user_changes = data.draw(st.lists(st.sampled_from(sorted(changed_by_run)), unique=True) if changed_by_run
                             else st.just([]), label="user changes")
    shared = {id(v) for name, v in namespace.items() for other, w in namespace.items() if other != name and v is w}
    mine: dict[str, Any] = {}
    for name in user_changes:
        value = namespace.get(name, MISSING)
        change = USER_CHANGES.get(type(value))
        if change is not None and id(value) not in shared and data.draw(st.booleans(), label="in place"):
            change(value)
        else:
            namespace[name] = "user"
        mine[name] = copy.deepcopy(namespace[name])

    outcome = journal.undo(namespace)

    assert set(outcome.left) == set(mine), outcome.line()
    for name in mine:
        assert equal(namespace[name], mine[name])
    for name in user_names(namespace):
        assert name in before or name in mine, f"{name} made by the run is still there: {outcome.line()}"
    for name, value in before.items():
        if name in mine:
            continue
        assert name in namespace, f"{name} is gone: {outcome.line()}"
        assert namespace[name] is value, f"{name} is not the same object: {outcome.line()}"
        assert equal(value, contents[name]), f"{name}: {value!r} != {contents[name]!r}: {outcome.line()}"
    assert not outcome.lost


def test_a_name_left_because_the_user_changed_it_is_taken_back_once_it_is_as_the_run_left_it() -> None:
    namespace: dict[str, Any] = {"df": pd.DataFrame({"a": [1, 2]})}
    original = namespace["df"]
    journal = Journals().run("r")
    run_code(journal, namespace, "df = df[df.a > 1]")
    left_by_run = namespace["df"]
    namespace["df"] = "mine"
    outcome = journal.undo(namespace)
    assert outcome.left == ["df"] and namespace["df"] == "mine"
    assert "left as they are, changed since the run: df" in outcome.line()
    namespace["df"] = left_by_run
    outcome = journal.undo(namespace)
    assert namespace["df"] is original and outcome.restored == ["df (rebound)"] and not outcome.left


def test_an_object_changed_in_place_is_restored_in_place_for_every_name_that_holds_it() -> None:
    frame = pd.DataFrame({"a": [1, 2, 3], "b": [4, 5, 6]})
    namespace: dict[str, Any] = {"df": frame, "cache": {"df": frame}}
    journal = Journals().run("r")
    run_code(journal, namespace, "df.drop(columns=['b'], inplace=True)\ndf['c'] = df.a * 2")
    assert list(namespace["cache"]["df"].columns) == ["a", "c"]
    outcome = journal.undo(namespace)
    assert namespace["df"] is frame and list(frame.columns) == ["a", "b"] and namespace["cache"]["df"] is frame
    assert outcome.restored == ["df (contents)"]


def test_the_call_reports_what_it_changed_in_namespace_order() -> None:
    namespace: dict[str, Any] = {"df": pd.DataFrame({"a": [1]}), "model": object(), "keep": [1]}
    journal = Journals().run("r")
    call = journal.before(namespace, "df['b'] = 2\nmodel = 'fitted'\ntmp = [keep[0]]")
    exec("df['b'] = 2\nmodel = 'fitted'\ntmp = [keep[0]]", namespace)
    assert [str(c) for c in journal.after_call(namespace, call)] == ["df (in place)", "model (rebound)", "tmp (new)"]
    assert id(namespace["keep"]) not in journal.saved  # read, not changed: its copy is not kept


def test_an_object_the_code_never_names_is_never_copied_nor_sized() -> None:
    class Untouchable(list):
        def __deepcopy__(self, memo: Any) -> Any:
            raise AssertionError("copied")

        def __sizeof__(self) -> int:
            raise AssertionError("sized")

    namespace: dict[str, Any] = {"big": Untouchable([1]), "small": [1]}
    journal = Journals().run("r")
    call = journal.before(namespace, "small.append(2)")
    assert list(call.copies) == [id(namespace["small"])]


def test_over_the_budget_and_uncopyable_objects_are_named_and_their_bindings_still_restored() -> None:
    big = np.zeros(2**20)  # 8 MB
    handle = io.StringIO("text")
    namespace: dict[str, Any] = {"big": big, "f": handle, "lock": threading.Lock(), "small": [1]}
    journal = Journals(budget=2**20).run("r")
    run_code(journal, namespace, "big[0] = 1\nf.write('x')\nsmall.append(2)\nbig2 = big\nbig = None\n"
                                 "lock.acquire(); lock.release()")
    outcome = journal.undo(namespace)
    assert namespace["big"] is big and "big2" not in namespace and namespace["small"] == [1]
    assert big[0] == 1  # not copied: the change stays
    line = outcome.line()
    assert "big (8 MB, over the 1 MB budget: not copied)" in line
    assert "f (an open file or stream: not copied)" in line and "lock (a lock: not copied)" in line


def test_the_budget_is_shared_by_the_runs_and_a_new_run_drops_the_oldest_copies() -> None:
    journals = Journals(budget=3 * 8 * 2**17)  # room for three 1 MB arrays
    namespace: dict[str, Any] = {f"a{i}": np.zeros(2**17) for i in range(4)}
    first = journals.run("first")
    run_code(first, namespace, "a0[0] = 1\na1[0] = 1")
    second = journals.run("second")
    run_code(second, namespace, "a2[0] = 1\na3[0] = 1")
    assert journals.room() >= 0
    assert second.undo(namespace).line() == "restored 2 variables: a2 (contents), a3 (contents)"
    outcome = first.undo(namespace)
    assert outcome.lost and "dropped to make room" in outcome.line()


def test_dynamic_code_journals_every_binding() -> None:
    namespace: dict[str, Any] = {"a": 1, "b": [1]}
    journal = Journals().run("r")
    run_code(journal, namespace, "globals()['c'] = 3\nexec('a = 2')\ndel globals()['b']")
    assert journal.dynamic
    outcome = journal.undo(namespace)
    assert namespace == {"a": 1, "b": [1]}
    assert sorted(outcome.restored) == ["__builtins__ (removed)", "a (rebound)", "b (brought back)", "c (removed)"]


def test_the_notebooks_functions_reach_what_they_use() -> None:
    namespace: dict[str, Any] = {"__name__": "__main__", "data": [1], "config": {"k": 1}}
    exec("def grow():\n    data.append(2)\n\ndef reset():\n    global config\n    config = {}\n\n"
         "class Model:\n    def fit(self):\n        data.append(3)\n\nm = Model()", namespace)
    journal = Journals().run("r")
    run_code(journal, namespace, "grow()\nreset()\nm.fit()")
    outcome = journal.undo(namespace)
    assert namespace["data"] == [1] and namespace["config"] == {"k": 1}, outcome.line()


def test_changes_by_someone_else_between_two_calls_are_left() -> None:
    namespace: dict[str, Any] = {"rows": [1]}
    journal = Journals().run("served session")
    run_code(journal, namespace, "rows.append(2)")
    namespace["rows"].append("user")  # between two calls of a served session
    run_code(journal, namespace, "rows.append(3)")
    outcome = journal.undo(namespace)
    assert outcome.left == ["rows"] and namespace["rows"] == [1, 2, "user", 3]


@pytest.mark.parametrize(("source", "names", "dynamic"), [
    ("x = [y for z in w]", {"x", "y", "w"}, ""),  # z is the comprehension's own
    ("f'{a.b[c]}'", {"a", "c"}, ""),
    ("def f():\n    global g\n    g = h", {"f", "g", "h"}, ""),
    ("import numpy as np\nfrom os import path as p", {"np", "numpy", "p"}, ""),
    ("try:\n    pass\nexcept E as e:\n    del d", {"E", "e", "d"}, ""),
    ("match v:\n    case {'k': k, **rest}:\n        pass\n    case [*tail]:\n        pass",
     {"v", "k", "rest", "tail"}, ""),
    ("n += 1\n(w := 2)", {"n", "w"}, ""),
    ("get_ipython().run_line_magic('time', 'x = 1')", {"get_ipython"}, "get_ipython()"),
    ("from os import *", set(), "from ... import *"),
    ("import sys\nsys.modules['__main__'].x = 1", {"sys"}, "sys.modules"),
    ("vars()['x'] = 1", {"vars"}, "vars()"),
    ("this is not python", set(), ""),
])
def test_reach_reads_every_road_to_a_name(source: str, names: set[str], dynamic: str) -> None:
    found = reach(source)
    assert names <= found.names and found.dynamic == dynamic


def test_reach_is_read_once_per_code_and_never_taken_from_other_code() -> None:
    """The reach is cached by code object, which compare by what they do: the same source compiled again (another
    file name, as each run_python call's is) is the same reach; code that differs in any name is not."""
    sources = ["a.x = 1", "b.x = 1", "a.y = 1", "a.x = 1.0", "f(a)", "f(b)", "del a", "def g():\n    return a",
               "def g():\n    return b", "exec('a')", "from os import *", "from os import path"]
    found = [reach([compile(source, f"<agent code {i}>", "exec")]) for i, source in enumerate(sources)]
    again = [reach([compile(source, f"<agent code {i + 100}>", "exec")]) for i, source in enumerate(sources)]
    assert found == again
    for source, one in zip(sources, found, strict=True):
        assert one.names == reach(source).names and one.dynamic == reach(source).dynamic
    assert found[0].names != found[1].names and found[0].names != found[2].names
    assert found[7].names != found[8].names and found[9].dynamic and not found[6].dynamic
    assert found[10].dynamic and not found[11].dynamic


def test_a_small_flat_container_is_copied_apart_and_its_changes_seen() -> None:
    rows, table, floats = [1, 2.5, "x"], {"k": 1}, [0.0, 1.0]
    namespace: dict[str, Any] = {"rows": rows, "table": table, "floats": floats}
    journal = Journals().run("r")
    run_code(journal, namespace, "rows[0] = 9\ntable['k'] = 2\nfloats[0] = -0.0")  # -0.0 == 0.0, yet a change
    assert {c.name for c in journal.after_call(namespace, journal.before(namespace, "rows"))} == set()
    outcome = journal.undo(namespace)
    assert outcome.restored == ["rows (contents)", "table (contents)", "floats (contents)"], outcome.line()
    assert rows == [1, 2.5, "x"] and table == {"k": 1} and str(floats[0]) == "0.0"
    assert namespace["rows"] is rows and namespace["table"] is table


SCALARS = st.one_of(st.integers(), st.booleans(), st.none(), st.text(max_size=3), st.binary(max_size=2),
                    st.floats(allow_nan=True), st.sampled_from([0.0, -0.0, 0, False]))


def typed(value: Any) -> Any:
    """Contents with every item's type and exact form (``-0.0`` is not ``0.0``, ``True`` not ``1``)."""
    if isinstance(value, dict):
        return type(value), sorted((repr((type(k), k)), repr((type(v), v))) for k, v in value.items())
    if isinstance(value, set):
        return type(value), sorted(repr((type(v), v)) for v in value)
    return type(value), [repr((type(v), v)) for v in value]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_fingerprint_never_mistakes_changed_contents_for_the_same(data: Any) -> None:
    """Two small containers with the same fingerprint hold the same items (the flat road and the pickle's alike)."""
    def container(label: str) -> Any:
        items = data.draw(st.lists(SCALARS, max_size=data.draw(st.sampled_from([3, 16, 20]))), label=label)
        kind = data.draw(st.sampled_from(["list", "set", "dict", "bytearray"]), label=label + " kind")
        if kind == "set":
            return {item for item in items if item == item}  # no nan: a set of nans is not a value
        if kind == "dict":
            return {item: index for index, item in enumerate(items) if item == item}
        return bytearray(bytes(abs(hash(item)) % 256 for item in items)) if kind == "bytearray" else items

    one, other = container("one"), container("other")
    if fingerprint(one) == fingerprint(other):
        assert typed(one) == typed(other)
    assert fingerprint(one) == fingerprint(one)  # unchanged: no false alarm


def test_sizes_are_estimated_without_visiting_all_of_a_large_container() -> None:
    assert estimate_size(np.zeros(1000)) >= 8000
    assert 8 * 10**6 <= estimate_size([0.5 + i for i in range(10**6)]) <= 40 * 10**6
    assert estimate_size(pd.DataFrame({"a": np.zeros(1000)})) >= 8000


def test_fingerprints_see_changes_and_only_changes() -> None:
    frame = pd.DataFrame({"a": [1.0, np.nan]})
    same = fingerprint(frame)
    assert fingerprint(frame) == same
    frame.iloc[0, 0] = 2.0
    assert fingerprint(frame) != same
    assert fingerprint(threading.Lock()) is None


def test_an_object_that_refuses_to_be_copied_is_named_and_one_larger_than_it_looks_is_not_kept() -> None:
    class Refuses:
        def __reduce__(self) -> Any:
            raise TypeError("no")

        def __deepcopy__(self, memo: Any) -> Any:
            raise TypeError("no")

    class Liar(list):  # says it is small, pickles to 4 MB
        def __sizeof__(self) -> int:
            return 10

        def __reduce__(self) -> Any:
            return (Liar, (), None, iter([b"x" * 2**22]))

    namespace: dict[str, Any] = {"odd": Refuses(), "liar": Liar()}
    journal = Journals(budget=2**20).run("r")
    call = journal.before(namespace, "odd.x = 1\nliar.append(1)")
    assert not call.copies
    exec("odd.x = 1\nliar.append(1)", namespace)
    journal.after_call(namespace, call)
    line = journal.undo(namespace).line()
    assert "odd (a Refuses that cannot be copied: TypeError)" in line
    assert "liar (4 MB, over the 1 MB budget: not copied)" in line


def test_an_object_whose_fingerprint_cannot_be_read_is_kept_as_changed() -> None:
    namespace: dict[str, Any] = {"d": {"f": lambda: 1, "n": 1}}  # a lambda does not pickle: no fingerprint
    original = namespace["d"]
    journal = Journals().run("r")
    run_code(journal, namespace, "d['n'] = 2")
    assert journal.undo(namespace).restored == ["d (contents)"] and original["n"] == 1


class Hostile:
    """Every attribute read raises, and so does asking its size."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"no {name}")

    def __sizeof__(self) -> int:
        raise RuntimeError("no size")


def test_an_object_that_breaks_every_rule_is_named_and_the_rest_still_journaled() -> None:
    namespace: dict[str, Any] = {"__name__": "__main__", "bad": Hostile(), "rows": [1]}
    journal = Journals().run("r")
    run_code(journal, namespace, "bad\nrows.append(2)\nbad = 1")
    outcome = journal.undo(namespace)
    assert "rows (contents)" in outcome.restored and isinstance(namespace["bad"], Hostile)
    assert outcome.line() == ("restored 2 variables: bad (rebound), rows (contents); not restored: bad (a Hostile "
                              "that cannot be read: RuntimeError)")


def assert_kept_counts_the_copies(journals: Journals) -> None:
    """``kept`` is a running count (the budget is checked at every copy): it must equal the copies held."""
    assert journals.kept == sum(j.kept for j in journals.runs.values())
    for journal in journals.runs.values():
        assert journal.kept == sum(s.size for s in journal.saved.values() if not s.dropped)
        assert all(s.copy is None for s in journal.saved.values() if s.dropped)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_copies_never_exceed_the_budget_and_every_change_is_restored_or_named(data: Any) -> None:
    budget = data.draw(st.integers(0, 64 * 1024), label="budget")
    journals = Journals(budget=budget)
    sizes = data.draw(st.lists(st.integers(1, 4096), min_size=1, max_size=6), label="float64s per array")
    namespace: dict[str, Any] = {f"a{i}": np.zeros(n) for i, n in enumerate(sizes)}
    originals = {name: value.copy() for name, value in namespace.items()}
    runs = []
    for r in range(data.draw(st.integers(1, 4), label="runs")):
        journal = journals.run(f"run{r}")
        runs.append(journal)
        for _ in range(data.draw(st.integers(1, 3), label="calls")):
            names = data.draw(st.lists(st.sampled_from(sorted(originals)), min_size=1, unique=True), label="touched")
            run_code(journal, namespace, "\n".join(f"{name}[0] += 1" for name in names))
            assert sum(j.kept for j in journals.runs.values()) <= budget
            assert_kept_counts_the_copies(journals)
    named: set[str] = set()
    for journal in reversed(runs):  # newest first, as a user takes them back
        outcome = journal.undo(namespace)  # a later run whose copy was dropped leaves its change: named as left
        assert_kept_counts_the_copies(journals)
        named |= {lost.split(" ", 1)[0] for lost in outcome.lost} | set(outcome.left)
    for name, value in originals.items():
        assert np.array_equal(namespace[name], value) or name in named, f"{name} changed and not named"


def test_the_count_of_copies_kept_follows_runs_forgotten_evicted_and_running_on() -> None:
    journals = Journals()
    namespace: dict[str, Any] = {f"a{i}": np.zeros(100) for i in range(30)}
    for i in range(30):  # more runs than are kept: the oldest are evicted with their copies
        run_code(journals.run(f"r{i}"), namespace, f"a{i}[0] += 1")
    assert len(journals.runs) == 20 and journals.kept > 0
    orphan = journals.run("r29")
    call = orphan.before(namespace, "a0[0] += 1")
    assert [j.run_id for j in journals.forget("r29")] == ["r29"]
    exec("a0[0] += 1", namespace)
    orphan.after_call(namespace, call)  # its run was forgotten while the call ran: counted for nothing
    assert_kept_counts_the_copies(journals)
    assert orphan.kept > 0 and "r29" not in journals.runs
    assert len(journals.forget()) == 19 and journals.kept == 0 and journals.room() == journals.budget
    assert journals.forget("r0") == []
