"""The package as a user gets it: ``python -m build`` makes the sdist and the wheel, ``twine check`` passes them as
the package index would, and the wheel is installed alone into a fresh venv.

The venv is a plain one (no ``--system-site-packages``): the wheel's dependencies come from the package index, so a
dependency missing from pyproject.toml, or a file missing from the wheel, fails here. Its kernel, started without
this checkout on ``PYTHONPATH`` and outside it, runs ``%load_ext agentkernel`` and a scripted ``%%agent`` run. Every
extra declared in pyproject.toml must resolve (``pip install --dry-run "jupyter-agentkernel[extra,...]"``). The wheel
carries the prebuilt front-end extension (share/jupyter/labextensions/agentkernel), which JupyterLab, installed into
the venv last with the ``lab`` extra, lists as enabled with no further step; the demo notebook then runs there as
``scripts/demo.sh`` runs it.
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
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
DIST = PROJECT["name"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
VERSION = re.search(r'__version__ = "(.+)"', (REPO / "agentkernel" / "_version.py").read_text())[1]  # type: ignore[index]
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
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build")
    dist = tmp_path_factory.mktemp("dist")
    # An sdist first and the wheel built from it: a file the sdist leaves out is missing from the wheel too.
    run([sys.executable, "-m", "build", "--outdir", dist, REPO], timeout=600)
    return dist


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (found,) = dist.glob(f"{DIST.replace('-', '_')}-{VERSION}-py3-none-any.whl")
    return found


def test_the_sdist_and_wheel_pass_twine_check(dist: Path):
    pytest.importorskip("twine")
    (sdist,) = dist.glob(f"{DIST.replace('-', '_')}-{VERSION}.tar.gz")
    # --strict: a warning (a README that does not render, a missing field) fails too
    result = run([sys.executable, "-m", "twine", "check", "--strict", sdist, *dist.glob("*.whl")], timeout=120)
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_the_metadata_names_the_distribution_its_version_licence_and_links(wheel: Path):
    import zipfile
    from email.parser import Parser

    archive = zipfile.ZipFile(wheel)
    info = f"{DIST.replace('-', '_')}-{VERSION}.dist-info/"
    meta = Parser().parsestr(archive.read(info + "METADATA").decode())
    assert (meta["Name"], meta["Version"], meta["License-Expression"]) == (DIST, VERSION, "MIT")
    assert info + "licenses/LICENSE" in archive.namelist()
    assert {url.split(",")[0] for url in meta.get_all("Project-URL")} >= {"Source", "Changelog", "Documentation"}
    assert meta["Description-Content-Type"] == "text/markdown" and "%%agent" in meta.get_payload()


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
    assert "agentkernel/jupyter/magics/agent.py" in names and "agentkernel/models/scripted.py" in names
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
    assert built["version"] == VERSION, "package.json and agentkernel/_version.py name different versions"


def test_the_installed_wheel_runs_a_scripted_agent_cell(kernel: KernelSession, venv: Path):
    loaded = kernel.ok("%load_ext agentkernel")
    assert loaded.stdout == "" and loaded.stderr == "", loaded.describe()  # no clash with another project reported
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
         "--report", report, f"{DIST}[{','.join(sorted(EXTRAS))}] @ {wheel.as_uri()}"], timeout=900)
    resolved = {canonicalize_name(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    for extra, requirements in EXTRAS.items():
        wanted = {canonicalize_name(Requirement(r).name) for r in requirements}
        assert wanted <= resolved, f"{DIST}[{extra}]: {sorted(wanted - resolved)} did not resolve"


def lab_env(venv: Path) -> dict[str, str]:
    """The venv's environment: its bin first, only its own Jupyter directories."""
    env = {**venv_env(), "PATH": os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")])}
    for name in ("JUPYTER_PATH", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR"):
        env.pop(name, None)
    return env


# Last in the module: they install the lab extra into the venv, which the tests above use as the wheel left it.
def test_jupyterlab_finds_the_extension_enabled_after_a_plain_install(venv: Path, wheel: Path):
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", f"{DIST}[lab] @ {wheel.as_uri()}"], timeout=900)
    env = lab_env(venv)
    result = subprocess.run([venv / "bin" / "jupyter", "labextension", "list"], capture_output=True, text=True,
                            timeout=120, env=env)
    listing = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)  # without the colours
    assert result.returncode == 0, listing
    assert re.search(rf"^\s*agentkernel v{re.escape(VERSION)} enabled OK \(python, {DIST}\)$", listing, re.M), listing
    assert str(venv / "share" / "jupyter" / "labextensions") in listing, listing


def test_the_demo_notebook_runs_from_the_installed_wheel(venv: Path, tmp_path: Path):
    # After the lab extra (the test above) as scripts/demo.sh has it: nbclient, outside the checkout.
    import shutil

    shutil.copytree(REPO / "notebooks", tmp_path / "notebooks")  # the notebook and the data it reads
    notebook = tmp_path / "notebooks" / "01_no_round_cap.ipynb"
    demo = tmp_path / "demo.py"
    demo.write_bytes((REPO / "scripts" / "demo.py").read_bytes())
    result = subprocess.run([venv / "bin" / "python", demo, notebook], capture_output=True, text=True, timeout=600,
                            env=lab_env(venv), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "agent: complete" in result.stdout, result.stdout[-3000:]
