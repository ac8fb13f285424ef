"""The package as a user gets it: ``python -m build`` makes a wheel, installed alone into a fresh venv.

The venv is a plain one (no ``--system-site-packages``): the wheel's dependencies come from the package index, so a
dependency missing from pyproject.toml, or a file missing from the wheel, fails here. Its kernel, started without
this checkout on ``PYTHONPATH`` and outside it, runs ``%load_ext agentkernel`` and a scripted ``%%agent`` run. Every
extra declared in pyproject.toml must resolve (``pip install --dry-run "agentkernel[extra,...]"``). The wheel carries
the prebuilt front-end extension (share/jupyter/labextensions/agentkernel), which JupyterLab, installed into the venv
last, lists as enabled with no further step.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_client import KernelSession, kernel_env
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.wheel

REPO = Path(__file__).resolve().parents[2]
EXTRAS: dict[str, list[str]] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
KERNEL = "agentkernel-wheel-check"


def venv_env() -> dict[str, str]:
    """This environment without the checkout on the path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def run(command: list[str | Path], timeout: float, **options: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout,
                            env=venv_env(), **options)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build")
    dist = tmp_path_factory.mktemp("dist")
    # An sdist first and the wheel built from it: a file the sdist leaves out is missing from the wheel too.
    run([sys.executable, "-m", "build", "--outdir", dist, REPO], timeout=600)
    (found,) = dist.glob("agentkernel-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", venv], timeout=120)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", wheel], timeout=900)
    run([python, "-m", "ipykernel", "install", "--prefix", venv, "--name", KERNEL], timeout=120)
    return venv


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory, venv: Path) -> Iterator[KernelSession]:
    root = tmp_path_factory.mktemp("wheel-kernel")
    (root / "cwd").mkdir()
    (root / "cwd" / "notes.txt").write_text("hello\n")
    env = {k: v for k, v in kernel_env(root).items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    previous = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(venv / "share" / "jupyter")  # where jupyter_client finds the venv's kernel
    try:
        session = KernelSession(root / "cwd", env, kernel_name=KERNEL)
    finally:
        if previous is None:
            del os.environ["JUPYTER_PATH"]
        else:
            os.environ["JUPYTER_PATH"] = previous
    try:
        yield session
    finally:
        session.shutdown()


def test_the_wheel_holds_the_package_and_no_tests(wheel: Path):
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "agentkernel/jupyter/magics.py" in names and "agentkernel/models/scripted.py" in names
    assert not [n for n in names if n.startswith(("tests/", "notebooks/", "benchmarks/"))]
    assert not [n for n in names if n.startswith(("src/", "node_modules/", "agentkernel/labextension/"))]


def test_the_wheel_holds_the_prebuilt_front_end_extension(wheel: Path):
    import zipfile

    archive = zipfile.ZipFile(wheel)
    data = f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.data/data/"  # installed under sys.prefix
    extension = data + "share/jupyter/labextensions/agentkernel/"
    names = archive.namelist()
    assert extension + "package.json" in names and extension + "install.json" in names, names
    assert [n for n in names if n.startswith(extension + "static/remoteEntry.")], names
    built = json.loads(archive.read(extension + "package.json"))
    assert built["name"] == "agentkernel" and built["jupyterlab"]["_build"]["load"].startswith("static/")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert built["version"] == project["version"], "package.json and pyproject.toml name different versions"


def test_the_installed_wheel_runs_a_scripted_agent_cell(kernel: KernelSession, venv: Path):
    kernel.ok("%load_ext agentkernel")
    where = Path(kernel.value("__import__('agentkernel').__file__"))
    assert where.is_relative_to(venv), where  # the wheel's copy, not this checkout
    assert kernel.value(f"[p for p in __import__('sys').path if p.startswith({str(REPO)!r})]") == []
    kernel.ok("from agentkernel import Call, ScriptedModel\n"
              "m = ScriptedModel([Call('list_dir', {'path': '.'}), 'It holds notes.txt.'])")
    cell = kernel.run("%%agent -m m --tools list_dir\nWhat is here?")
    assert cell.status == "ok" and not cell.errors, cell.describe()
    assert kernel.value("(_agent.status, _agent.answer)") == ["complete", "It holds notes.txt."]
    assert "notes.txt" in kernel.value("_agent.history[2]['output']")


def test_every_extra_resolves(venv: Path, wheel: Path, tmp_path: Path):
    # One resolution for all of them (each alone costs as much again, on what they share).
    report = tmp_path / "report.json"
    run([venv / "bin" / "python", "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--report", report, f"agentkernel[{','.join(sorted(EXTRAS))}] @ {wheel.as_uri()}"], timeout=900)
    resolved = {canonicalize_name(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    for extra, requirements in EXTRAS.items():
        wanted = {canonicalize_name(Requirement(r).name) for r in requirements}
        assert wanted <= resolved, f"agentkernel[{extra}]: {sorted(wanted - resolved)} did not resolve"


# Last in the module: it installs JupyterLab into the venv, which the tests above use as the wheel left it.
def test_jupyterlab_finds_the_extension_enabled_after_a_plain_install(venv: Path):
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "jupyterlab"], timeout=900)
    env = {**venv_env(), "PATH": os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")])}
    for name in ("JUPYTER_PATH", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR"):  # only the venv's own directories
        env.pop(name, None)
    result = subprocess.run([venv / "bin" / "jupyter", "labextension", "list"], capture_output=True, text=True,
                            timeout=120, env=env)
    listing = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)  # without the colours
    assert result.returncode == 0, listing
    assert re.search(r"^\s*agentkernel v\S+ enabled OK \(python, agentkernel\)$", listing, re.M), listing
    assert str(venv / "share" / "jupyter" / "labextensions") in listing, listing
