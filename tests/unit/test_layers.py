"""The architecture, checked: imports point one way (the core never imports IPython or ipywidgets, nothing imports
the package top, no module-level import circles) and ``%load_ext`` loads no model or server SDK."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agentkernel"
SDKS = ("openai", "anthropic", "mcp", "genai_prices", "opentelemetry")  # OpenTelemetry: with tracing off


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, *, module_level: bool, typing: bool = True) -> set[str]:
    """The absolute names module ``name`` imports: at module level (``if``/``try`` blocks included,
    ``TYPE_CHECKING`` ones not), or anywhere in it (inside functions too: the lazy imports; ``typing=False``: not
    those under ``TYPE_CHECKING``, which never run)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    never_run = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If) and not typing
                 and "TYPE_CHECKING" in ast.unparse(block.test) for stmt in block.body for node in ast.walk(stmt)}

    def top(nodes: list[ast.stmt]) -> list[ast.stmt]:
        found = []
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            found.append(node)
            if isinstance(node, ast.If | ast.Try):
                found += top([*node.body, *node.orelse, *getattr(node, "finalbody", []),
                              *(s for h in getattr(node, "handlers", []) for s in h.body)])
        return found

    names: set[str] = set()
    for node in top(tree.body) if module_level else ast.walk(tree):
        if id(node) in never_run:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            names.add(target)
            if not node.module:  # from . import x: x may be a module
                names.update(f"{target}.{alias.name}" for alias in node.names)
    return names


def test_the_core_never_imports_ipython_or_ipywidgets() -> None:
    for name, path in modules().items():
        if name.startswith("agentkernel.jupyter"):
            continue
        front_end = {i for i in imports(name, path, module_level=False) if i.split(".")[0] in ("IPython", "ipywidgets")}
        assert not front_end, f"{name} imports {front_end}: only agentkernel.jupyter may"


def test_nothing_imports_the_package_top() -> None:
    for name, path in modules().items():
        if name == "agentkernel":
            continue
        assert "agentkernel" not in imports(name, path, module_level=False), f"{name} imports agentkernel's top"


@pytest.mark.parametrize("module_level", [True, False], ids=["module level", "lazy imports too"])
def test_no_import_circles(module_level: bool) -> None:
    """No circle among the package's modules, counting the imports inside functions too: a lazy import that closes
    a circle is a layer that does not hold (the adapters once imported the provider table that imports them)."""
    known = modules()
    graph = {name: {i for i in imports(name, path, module_level=module_level, typing=False) if i in known and i != name}
             for name, path in known.items()}
    state: dict[str, str] = {}
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                raise AssertionError("import circle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                walk(nxt)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node)


LOAD = r"""
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "agentkernel")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in SDKS)
shell.run_cell("import agentkernel\nm = agentkernel.ScriptedModel(['hello'])")
shell.run_cell("%%agent -m m\nsay hello", store_history=False)
ran = sorted(m for m in sys.modules if m.split(".")[0] in SDKS)
print(json.dumps({"loaded": loaded, "ran": ran, "status": shell.user_ns["_agent"].status}))
"""


def test_load_ext_and_a_scripted_run_import_no_sdk() -> None:
    code = f"SDKS = {SDKS!r}\n{LOAD}"
    quiet = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}  # tracing off, as by default
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=PACKAGE.parent, env=quiet)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"loaded": [], "ran": [], "status": "complete"}


LAZY = ("agentkernel.loop", "agentkernel.events", "agentkernel.listeners.timeline", "agentkernel.listeners.transcript",
        "agentkernel.listeners.tracing", "agentkernel.skills", "agentkernel.instructions", "agentkernel.tools.toolsets",
        "agentkernel.jupyter.plan", "agentkernel.jupyter.cell", "agentkernel.jupyter.panel",
        "agentkernel.jupyter.render",
        "agentkernel.jupyter.mcp_servers", "agentkernel.jupyter.serve", "agentkernel.jupyter.kernel.tools",
        "agentkernel.jupyter.kernel.notebook_tools", "agentkernel.jupyter.kernel.code_runner",
        "agentkernel.jupyter.kernel.undo", "ipywidgets")
"""Modules ``%load_ext`` must not import: it only registers the magics, their ``%config`` traits and the kernel
hooks, and a cell imports these where it first needs them (each cost the load 1-3 ms; ipywidgets far more)."""

LOAD_ONLY = r"""
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "agentkernel")
loaded = [m for m in LAZY if m in sys.modules]
shell.run_cell("import agentkernel\nm = agentkernel.ScriptedModel(['hello'])")
shell.run_cell("%%agent -m m\nsay hello", store_history=False)
print(json.dumps({"loaded": loaded, "ran": [m for m in LAZY if m in sys.modules]}))
"""


def test_load_ext_imports_only_what_registering_the_magic_needs() -> None:
    known = modules()
    assert [m for m in LAZY if m not in known and m != "ipywidgets"] == []  # no name the test could never see
    done = subprocess.run([sys.executable, "-c", f"LAZY = {LAZY!r}\n{LOAD_ONLY}"], capture_output=True, text=True,
                          check=True, cwd=PACKAGE.parent)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["loaded"] == [], f"%load_ext imports {seen['loaded']}: import them where a run first needs them"
    # a run does use them, all but %agent_serve's (else the list above would check nothing)
    assert set(seen["ran"]) == set(LAZY) - {"agentkernel.jupyter.serve"}


def test_import_agentkernel_alone_loads_nothing_heavy() -> None:
    code = ("import sys, agentkernel\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'mcp', 'pydantic', 'IPython')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=PACKAGE.parent)
    assert done.stdout.strip() == "[]"


def class_lines(path: Path, name: str) -> int:
    """How many lines the class ``name`` of the module at ``path`` spans."""
    found = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)
             and node.name == name]
    assert len(found) == 1, f"{path} defines {name} {len(found)} times"
    return (found[0].end_lineno or 0) - found[0].lineno + 1


def test_the_magics_only_parse_and_hand_off() -> None:
    """Each magic class is thin: a cell's life is in ``jupyter/cell.py``, what they share in ``kernel_state.py``."""
    known = modules()
    assert class_lines(known["agentkernel.jupyter.magics.agent"], "AgentMagics") < 150
    for name in ("serve", "mcp", "undo", "secret"):
        module = known[f"agentkernel.jupyter.magics.{name}"]
        classes = [n.name for n in ast.parse(module.read_text()).body if isinstance(n, ast.ClassDef)]
        assert len(classes) == 1 and class_lines(module, classes[0]) < 150, module


def test_no_function_is_over_60_lines_and_the_loop_stays_in_one_sitting() -> None:
    """A function reads in one screen; the loop's class keeps to the loop (its briefing, counters, metering,
    streaming and guards live in modules of their own)."""
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (node.end_lineno or 0) - node.lineno >= 60:
                long.append(f"{name}.{node.name}: {(node.end_lineno or 0) - node.lineno + 1} lines")
    assert not long, long
    assert class_lines(modules()["agentkernel.loop"], "AgentLoop") < 300


ABOVE_THE_LISTENERS = ("agentkernel.loop", "agentkernel.mcp.session", "agentkernel.jupyter", "agentkernel.listeners")
"""What may import a listener: the loop and the served session (which tell them the run's events), the front end
(which shows the timeline and starts the spans), and the listeners themselves."""


def test_nothing_below_imports_the_listeners() -> None:
    """The listeners hear the events; the events, the record's data, the models and the tools never import them, not
    even lazily."""
    for name, path in modules().items():
        if name == "agentkernel" or name.startswith(ABOVE_THE_LISTENERS):
            continue
        up = {i for i in imports(name, path, module_level=False, typing=False) if i.startswith("agentkernel.listeners")}
        assert not up, f"{name} imports {up}: only {ABOVE_THE_LISTENERS} may"
