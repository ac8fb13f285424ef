"""The package as published: one version, a changelog entry for it, the distribution's own name in every
install line, a missing SDK said in one line, and a misspelt provider caught before it becomes an OpenAI model name.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkernel import __version__
from agentkernel.distribution import DISTRIBUTION
from agentkernel.errors import AgentConfigError
from agentkernel.extras import SDKS, missing, needs
from agentkernel.models.providers import PROVIDERS, misspelt_provider, resolve

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_version_is_written_once_and_the_front_end_and_changelog_agree():
    assert "version" not in PROJECT["project"] and PROJECT["project"]["dynamic"] == ["version"]
    assert PROJECT["tool"]["hatch"]["version"]["path"] == "agentkernel/_version.py"
    assert json.loads((REPO / "package.json").read_text())["version"] == __version__
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog and re.search(rf"^## \[{re.escape(__version__)}\] - \d{{4}}-\d\d-\d\d$",
                                                        changelog, re.M)


def test_every_install_line_names_this_distribution():
    assert PROJECT["project"]["name"] == DISTRIBUTION
    assert json.loads((REPO / "install.json").read_text())["packageName"] == DISTRIBUTION
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md"),
             *(REPO / "notebooks").glob("*.ipynb")]
    for page in pages:
        text = page.read_text()
        wrong = re.findall(r"pip install (?:-\w+ )*['\"]?agentkernel\b(?!-)", text)
        assert not wrong, f"{page.name}: {wrong}"
    assert f"pip install {DISTRIBUTION}" in (REPO / "docs" / "getting-started.md").read_text()
    assert f"pip install\n'{DISTRIBUTION}[lab]'" in (REPO / "README.md").read_text()


@pytest.mark.parametrize("module", sorted(SDKS))
def test_a_missing_sdk_is_one_line_naming_its_pip_install(module: str):
    line = missing(module)
    assert "\n" not in line and "pip install " in line and module.replace("_", "-") in line
    with pytest.raises(AgentConfigError, match=re.escape(line)):
        with needs(module):
            raise ModuleNotFoundError(f"No module named {module!r}", name=f"{module}.part")


def test_needs_lets_other_import_failures_through():
    with pytest.raises(ModuleNotFoundError):
        with needs("anthropic"):
            raise ModuleNotFoundError("No module named 'httpx'", name="httpx")


@given(st.sampled_from(sorted(PROVIDERS)), st.integers(0, 20), st.sampled_from(["drop", "double", "swap", "change"]),
       st.text("abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=12))
def test_a_provider_with_one_slip_is_suggested_and_never_sent_to_openai(name: str, at: int, slip: str, model: str):
    i = at % (len(name) - 1)
    typo = {"drop": name[:i] + name[i + 1:], "double": name[:i] + name[i] + name[i:],
            "swap": name[:i] + name[i + 1] + name[i] + name[i + 2:],
            "change": name[:i] + ("x" if name[i] != "x" else "y") + name[i + 1:]}[slip]
    if typo in PROVIDERS:  # a slip that spells another provider (or itself, swapping two equal letters)
        return
    suggestion = misspelt_provider(f"{typo}:{model}")
    assert suggestion is not None and f"did you mean {name}:{model}?" in suggestion, (typo, suggestion)
    with pytest.raises(ValueError, match="did you mean"):
        resolve(f"{typo}:{model}")
    assert resolve(f"{typo}:{model}", api="chat", base_url="http://127.0.0.1:8080/v1").model == f"{typo}:{model}"


@pytest.mark.parametrize("name", ["qwen3:8b", "llama3:8b", "gemma:2b", "ft:gpt-4o-mini:org:custom:id", "gpt-4.1-mini",
                                  "mistral:7b", "phi3:mini", "deepseek-r1:1.5b"])
def test_names_that_are_no_typo_pass_as_they_are(name: str):
    assert misspelt_provider(name) is None
    assert resolve(name).model == name


def test_the_course_is_counted_right_where_it_is_counted():
    numbers = sorted(int(p.name[:2]) for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
             "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
    assert numbers == list(range(1, len(numbers) + 1))
    assert f"The course, {words[len(numbers)]} short notebooks" in (REPO / "docs" / "getting-started.md").read_text()
    assert f"`notebooks/01_…` to `{len(numbers):02d}_…`" in (REPO / "README.md").read_text()


def test_the_readme_checkpoint_command_runs_the_three_tests():
    import os
    import subprocess
    import sys

    section = (REPO / "README.md").read_text().split("## The course", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```bash\n(python -m pytest [^\n#]+?)\s*(?:#[^\n]*)?\n```", section)[1]  # type: ignore[index]
    notebook = (REPO / "notebooks" / "01_no_round_cap.ipynb").read_text()
    assert command in notebook  # the first course notebook names the same command
    for words in ([], ["-k", "repeated"]):
        result = subprocess.run([sys.executable, *command.split()[1:], "-q", "-p", "no:cacheprovider", *words],
                                cwd=REPO, capture_output=True, text=True, timeout=300,
                                # this checkout first, and the rest kept: the harness's folder is on it, for the
                                # plugin PYTEST_PLUGINS names (tests/harness/users_kernels.py)
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
        assert result.returncode == 0, result.stdout[-2000:]
        assert f"{3 if not words else 1} passed" in result.stdout, result.stdout[-2000:]


def test_no_transcript_takes_no_value_so_a_one_line_prompt_keeps_its_words():
    from agentkernel.jupyter.options import split_line

    assert split_line("--no-transcript what is in x.txt?") == (["--no-transcript"], "what is in x.txt?")
    assert split_line("-m m --no-transcript --max-seconds 5 go") == (["-m", "m", "--no-transcript", "--max-seconds",
                                                                      "5"], "go")


@given(st.lists(st.integers(0, 999_999), unique=True, max_size=40), st.integers(1, 30))
def test_a_transcript_folder_keeps_the_newest_runs_and_nothing_else_is_touched(stamps: list[int], keep: int):
    import tempfile

    from agentkernel.listeners.transcript import run_transcript

    with tempfile.TemporaryDirectory() as folder:
        names = [f"20261201-{s:06d}-{s:012x}.jsonl" for s in stamps]
        for name in [*names, "mine.jsonl", "20261201-000000-notarun.jsonl"]:
            (Path(folder) / name).write_text("{}\n")
        new = run_transcript(folder, "abcdefabcdef", keep=keep)
        left = sorted(p.name for p in Path(folder).iterdir())
        kept = sorted(names)[len(names) - min(len(names), keep - 1):] if keep > 1 else []
        assert left == sorted([*kept, "mine.jsonl", "20261201-000000-notarun.jsonl"])
        assert new.parent == Path(folder) and not new.exists()  # the run writes it


def test_no_two_test_modules_share_a_name():
    """The test folders are not packages, so pytest imports each module by its file name: two of one name stop the
    whole run at collection ("import file mismatch"). The course's checkpoint is the one left out of a tree run."""
    names: dict[str, list[str]] = {}
    for path in (REPO / "tests").rglob("test_*.py"):
        if "node_modules" not in path.parts and path != REPO / "tests" / "test_sampling_loop.py":
            names.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert not {name: paths for name, paths in names.items() if len(paths) > 1}
