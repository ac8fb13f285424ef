"""Sphinx configuration for agentkernel's documentation (MyST Markdown pages, the course rendered from the notebooks'
saved outputs, the Python API from the docstrings).

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (``scripts/test.sh`` runs it).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the checkout's agentkernel, not whatever copy is installed
sys.path.insert(0, str(DOCS / "_ext"))

from agentkernel import __version__  # noqa: E402

project = "agentkernel"
author = "the agentkernel authors"
copyright = "the agentkernel authors"
release = version = __version__

extensions = [
    "myst_nb",  # also loads myst_parser for the .md pages
    "sphinx.ext.autodoc",
    "agentkernel_docs",  # the options page from agentkernel/jupyter/options.py, the course from notebooks/
]

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
root_doc = "index"
# Unmarked code blocks (in the pages and the notebooks' Markdown) are IPython: %%agent cells, %config lines.
highlight_language = "ipython3"

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# The notebooks are rendered from the outputs saved in them, never executed here (nbval and the other runners
# execute them in scripts/test.sh).
nb_execution_mode = "off"
# The panel's widgets need a live kernel; the saved notebooks also hold its static HTML rendering, which is shown.
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
# The record's Undo button (application/vnd.agentkernel.undo+json, notebook 11) is the extension's, for a live
# kernel: myst-nb warns of a MIME type it cannot render even when it shows the bundle's plain text instead.
suppress_warnings = ["mystnb.unknown_mime_type"]

autodoc_member_order = "bysource"
# A docstring's reference to something the API page does not document (a private helper, a type variable, the
# standard library: the build reads no inventories, so it needs no network) is shown as code, not a warning.
nitpicky = False
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"  # the signature stays short; documented fields get types

html_theme = "alabaster"
html_title = f"agentkernel {release}"
html_static_path = ["_static"]
html_theme_options = {
    "description": "A Jupyter-native agent loop",
    "fixed_sidebar": True,
    "page_width": "1180px",
    "sidebar_width": "240px",
}
