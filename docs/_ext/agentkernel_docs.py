"""Pages made from the code at build time, so they cannot drift from it (as IPython generates its magics and config
pages):

- ``{agent-options}``: the ``%%agent`` options, one table per group, from the option table
  ``agentkernel.jupyter.options.OPTIONS`` (the same table the magic's parser, its ``%%agent?`` help and the
  ``%config`` traits are made from).
- ``{agent-help}``: what ``%%agent?`` prints, from the magic's own parser.
- ``agent-statuses``: the statuses a run can end with, from ``agentkernel.STATUSES``.
- the course: ``notebooks/*.ipynb`` copied into ``docs/course/notebooks/`` (git-ignored) when the build starts, and
  rendered by MyST-NB from their saved outputs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
COURSE = "course/notebooks"


def _flags(option: Any) -> str:
    """An option as it is typed: ``--model/-m NAME``, ``--api responses|chat``, ``--images/--no-images``."""
    spec = option.spec
    if option.kind is bool:
        return f"{spec.flags[0]}/--no-{spec.flags[0][2:]}" if option.optional else "/".join(spec.flags)
    if spec.choices:
        value = "|".join(spec.choices)
    elif spec.alone is not None:
        value = f"[{spec.metavar}]"
    else:
        value = spec.metavar or ""
    return f"{'/'.join(spec.flags)} {value}".strip()


def _default(option: Any) -> str:
    """The default as the help states it, naming the environment variable consulted before it."""
    if not option.spec.trait:
        return "(none)"
    shown = option.shown_default
    env = f"${option.spec.env}"
    return shown if not option.spec.env or env in shown else f"{env}, else {shown}"


def _config_name(option: Any) -> nodes.paragraph:
    """The name ``%config AgentMagics.<name>`` takes, if it takes the option."""
    return _literal(option.name) if option.spec.trait else nodes.paragraph(text="this cell only")


def _literal(text: str) -> nodes.paragraph:
    return nodes.paragraph("", "", nodes.literal(text, text))


def _table(header: list[str], rows: list[list[nodes.Node]], widths: list[int]) -> nodes.table:
    group = nodes.tgroup(cols=len(header))
    group += [nodes.colspec(colwidth=width) for width in widths]
    head = nodes.thead()
    head += nodes.row("", *(nodes.entry("", nodes.paragraph(text=title)) for title in header))
    body = nodes.tbody()
    for cells in rows:
        body += nodes.row("", *(nodes.entry("", cell) for cell in cells))
    group += [head, body]
    table = nodes.table(classes=["agent-options", "colwidths-given"])
    table += group
    return table


class AgentOptionsDirective(SphinxDirective):
    """The option table, one table per group, in the order ``options.py`` declares them."""

    def run(self) -> list[nodes.Node]:
        from agentkernel.jupyter import options
        from agentkernel.jupyter.options import GROUPS, OPTIONS

        self.env.note_dependency(options.__file__)  # an incremental build rereads the page when the table changes
        result: list[nodes.Node] = []
        for group in GROUPS:
            rows = [[_literal(_flags(o)) if o.spec.flags else nodes.paragraph(text="(%config only)"),
                     nodes.paragraph(text=o.spec.help), nodes.paragraph(text=_default(o)), _config_name(o)]
                    for o in OPTIONS if o.spec.group == group]
            result.append(nodes.rubric(text=group))
            result.append(_table(["option", "meaning", "default", "%config name"], rows, [24, 42, 20, 14]))
        return result


class AgentHelpDirective(SphinxDirective):
    """The text ``%%agent?`` shows, from the magic's parser."""

    def run(self) -> list[nodes.Node]:
        from agentkernel.jupyter import options
        from agentkernel.jupyter.magics import AgentMagics

        self.env.note_dependency(options.__file__)
        text = AgentMagics.agent.parser.format_help()
        return [nodes.literal_block(text, text, language="text")]


class AgentStatusesDirective(SphinxDirective):
    """The statuses of a run, in order, from ``agentkernel.STATUSES``."""

    def run(self) -> list[nodes.Node]:
        from agentkernel.endings import STATUSES

        items = nodes.bullet_list()
        items += [nodes.list_item("", _literal(status)) for status in STATUSES]
        return [items]


def copy_course(app: Sphinx, config: Any) -> None:
    """Copy the course's notebooks beside the pages (only those that changed, so a rebuild stays incremental)."""
    target = Path(app.srcdir) / COURSE
    target.mkdir(parents=True, exist_ok=True)
    wanted = {path.name: path for path in sorted(NOTEBOOKS.glob("*.ipynb"))}
    for stale in target.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()
    for name, source in wanted.items():
        copy = target / name
        if not copy.is_file() or copy.read_bytes() != source.read_bytes():
            shutil.copyfile(source, copy)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("agent-options", AgentOptionsDirective)
    app.add_directive("agent-help", AgentHelpDirective)
    app.add_directive("agent-statuses", AgentStatusesDirective)
    app.connect("config-inited", copy_course)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
