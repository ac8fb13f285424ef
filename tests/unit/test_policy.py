"""The admin's policy (agentkernel/jupyter/policy.py): where it is read from, how files merge, how it fails closed,
and what it does to a cell's options."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkernel.errors import AgentConfigError
from agentkernel.jupyter.options import AgentOptions
from agentkernel.jupyter.policy import POLICY_FILE, Policy, policy_folders


def folder(tmp: Path, name: str, rules: object) -> str:
    path = tmp / name
    path.mkdir(parents=True, exist_ok=True)
    (path / POLICY_FILE).write_text(rules if isinstance(rules, str) else json.dumps(rules))
    return str(path)


def test_only_the_admins_folders_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    hub = folder(tmp_path, "hub", {"max_cost": 1})
    user = folder(tmp_path, "home/.jupyter", {"max_cost": 100})
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", hub)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", user)  # the user's own folder: never a policy
    monkeypatch.setenv("JUPYTER_NO_CONFIG", "1")  # does not empty the list
    folders = policy_folders()
    assert folders[0] == hub and user not in folders
    assert any(f.endswith("etc/jupyter") for f in folders[1:])
    policy = Policy.load()
    assert policy.files == (str(Path(hub) / POLICY_FILE),) and policy.ceiling("max_cost").value == 1


def test_files_merge_and_the_strictest_value_wins(tmp_path: Path):
    a = folder(tmp_path, "a", {"max_cost": 2, "max_seconds": 60, "serve": True, "models": ["gpt-4.1*"],
                               "allow_writes": False})
    b = folder(tmp_path, "b", {"max_cost": 0.5, "max_seconds": 600, "serve": False, "models": ["*-mini"],
                               "allow_writes": True, "comment": "the course's plan"})
    policy = Policy.load([a, b])
    assert policy.ceiling("max_cost").value == 0.5 and policy.ceiling("max_cost").file.startswith(b)
    assert policy.ceiling("max_seconds").value == 60 and policy.ceiling("serve").value is False
    assert policy.ceiling("allow_writes").value is False
    policy.check_model("gpt-4.1-mini")  # in both lists
    with pytest.raises(AgentConfigError, match=r"the model 'gpt-4.1': refused by the agentkernel policy \(models = "
                                               r"\[\"\*-mini\"\] in .*/b/agentkernel_policy.json\)"):
        policy.check_model("gpt-4.1")
    with pytest.raises(AgentConfigError, match=r"models = \[\"gpt-4.1\*\"\]"):
        policy.check_model("o4-mini")


def test_a_model_pattern_may_name_the_provider(tmp_path: Path):
    policy = Policy.load([folder(tmp_path, "p", {"models": ["openai:gpt-4.1-mini", "ollama:*"]})])
    for name in ("gpt-4.1-mini", "openai:gpt-4.1-mini", "ollama:qwen3:4b"):
        policy.check_model(name)
    plain = Policy.load([folder(tmp_path, "q", {"models": ["gpt-4.1-mini"]})])
    plain.check_model("openai:gpt-4.1-mini")
    with pytest.raises(AgentConfigError):
        plain.check_model("openrouter:gpt-4.1-mini")  # another provider's model of that name is not OpenAI's
    for name in ("anthropic:claude-sonnet-5", "gpt-5", "openrouter:ollama/x"):
        with pytest.raises(AgentConfigError):
            policy.check_model(name)


@pytest.mark.parametrize("text, says", [
    ("{not json", "is not JSON"),
    ("[1, 2]", "holds a list, not an object of rules"),
    ('{"max_cost": "1"}', 'has max_cost = "1", not a number more than 0'),
    ('{"max_cost": -1}', "not a number more than 0"),
    ('{"max_cost": 0}', "not a number more than 0"),
    ('{"max_seconds": true}', "not a number more than 0"),
    ('{"max_tool_calls": 2.5}', "not a whole number more than 0"),
    ('{"max_cost": 1e999}', "not a number more than 0"),
    ('{"models": "gpt-4.1-mini"}', "not a list of names"),
    ('{"tools": [1]}', "not a list of names"),
    ('{"serve": "no"}', "not true or false"),
    ('{"max_costs": 1}', "has the unknown rule 'max_costs'"),
    ("\udcff", "is not JSON"),
])
def test_a_broken_policy_fails_closed_with_one_line(tmp_path: Path, text: str, says: str):
    good = folder(tmp_path, "good", {"max_cost": 5})
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / POLICY_FILE).write_bytes(text.encode("utf-8", "surrogateescape"))
    policy = Policy.load([good, str(bad)])
    assert policy.broken and says in policy.broken and str(bad / POLICY_FILE) in policy.broken
    assert "\n" not in policy.broken and policy.describe() == policy.broken
    for refused in (lambda: policy.apply(AgentOptions()), policy.check_serve):
        with pytest.raises(AgentConfigError, match="no run is allowed until it is fixed"):
            refused()


def test_an_unreadable_policy_fails_closed(tmp_path: Path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / POLICY_FILE).mkdir()  # a folder where the file should be
    assert "cannot be read" in (Policy.load([str(bad)]).broken or "")


def test_files_that_disagree_on_transcripts_fail_closed(tmp_path: Path):
    policy = Policy.load([folder(tmp_path, "a", {"transcripts": True}), folder(tmp_path, "b", {"transcripts": False})])
    assert policy.broken and "disagree on transcripts" in policy.broken


def test_the_ceilings_refuse_more_and_fill_in_what_the_cell_left_off(tmp_path: Path):
    policy = Policy.load([folder(tmp_path, "p", {"max_cost": 0.5, "max_seconds": 120, "max_tool_calls": 20})])
    within = policy.apply(replace(AgentOptions(), max_cost=0.25, max_tool_calls=20))
    assert (within.max_cost, within.max_seconds, within.max_tool_calls) == (0.25, 120, 20)
    with pytest.raises(AgentConfigError, match=r"^--max-cost 0.75 \(from the cell or %config AgentMagics.max_cost\): "
                                               r"refused by the agentkernel policy \(max_cost = 0.5 in .*\)$"):
        policy.apply(replace(AgentOptions(), max_cost=0.75))
    with pytest.raises(AgentConfigError, match=r"^--max-seconds 121"):
        policy.apply(replace(AgentOptions(), max_seconds=121))


def test_switches_and_tools(tmp_path: Path):
    policy = Policy.load([folder(tmp_path, "p", {"allow_writes": False, "transcripts": True,
                                                "tools": ["read_file", "list_dir", "run_*"]})])
    with pytest.raises(AgentConfigError, match="--allow-writes"):
        policy.apply(replace(AgentOptions(), allow_writes=True))
    with pytest.raises(AgentConfigError, match="--no-transcript"):
        policy.apply(replace(AgentOptions(), transcripts=""))
    assert policy.apply(AgentOptions()).tools == ["read_file", "list_dir", "run_python"]  # the default, narrowed
    policy.check_tool("run_python")
    with pytest.raises(AgentConfigError, match=r"the tool 'add_cell': refused .*tools = \[\"read_file\""):
        policy.check_tool("add_cell")
    quiet = Policy.load([folder(tmp_path, "q", {"transcripts": False})])
    assert quiet.apply(AgentOptions()).transcripts == ""
    with pytest.raises(AgentConfigError, match="transcripts = '/tmp/t'"):
        quiet.apply(replace(AgentOptions(), transcripts="/tmp/t"))


def test_no_policy_changes_nothing(tmp_path: Path):
    policy = Policy.load([str(tmp_path)])
    options = replace(AgentOptions(), max_cost=1e6, allow_writes=True, transcripts="")
    assert policy.apply(options) == options and "no agentkernel policy" in policy.describe()
    policy.check_serve()
    policy.check_model("anything:at-all")


@given(ceiling=st.floats(0.001, 1e6), value=st.floats(0, 1e7), seconds=st.floats(0.001, 1e6))
def test_whatever_the_cell_asks_the_run_stays_within_the_ceilings(tmp_path_factory, ceiling, value, seconds):
    tmp = tmp_path_factory.mktemp("p")
    policy = Policy.load([folder(tmp, "p", {"max_cost": ceiling, "max_seconds": seconds})])
    try:
        applied = policy.apply(replace(AgentOptions(), max_cost=value))
    except AgentConfigError as e:
        assert value > ceiling and POLICY_FILE in str(e) and "\n" not in str(e)
    else:
        assert 0 < applied.max_cost <= ceiling and applied.max_seconds == seconds
        assert applied.max_cost == (value or ceiling)


# -- the option values checked before a run (issue 40) -------------------------------------------------------------

@given(value=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**15, 10**15))
def test_the_command_line_and_the_plan_agree_on_every_number(value):
    """A number the command line takes is one the plan takes (from %config) and the reverse; a refusal is one line
    naming the value."""
    import argparse
    import math

    from agentkernel.jupyter.options import CONVERTERS, MAX_NUMBER, check

    try:
        CONVERTERS[float](repr(value))
        parsed = True
    except argparse.ArgumentTypeError as e:
        assert "\n" not in str(e) and repr(value) in str(e)
        parsed = False
    try:
        check(replace(AgentOptions(), max_seconds=value))
        planned = True
    except AgentConfigError as e:
        assert str(e).startswith("--max-seconds: must be ") and "\n" not in str(e)
        planned = False
    assert parsed is planned is (math.isfinite(value) and 0 <= value <= MAX_NUMBER)
