"""Which distribution this package is: ``jupyter-agentkernel`` on the package index, imported as ``agentkernel``.

The index's ``agentkernel`` is another project, which also installs a top-level ``agentkernel`` package. Installed
into the same environment, the two write into one folder and the last install's files win. This package cannot
speak when the other one's ``agentkernel/__init__.py`` is the one Python finds (that code is not ours), so the check
lives where ours runs: :func:`foreign_distribution` tells ``%load_ext agentkernel`` that the other project is
installed beside it, and the message names the fix. The check looks distributions up by that one name (about 2 ms
here); mapping every installed distribution to its modules would cost a quarter of a second at each ``%load_ext``.
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "jupyter-agentkernel"
"""The name ``pip install`` takes."""
FOREIGN = "agentkernel"
"""The index's other project whose package is also called ``agentkernel``."""
OWN_SUMMARY = "A Jupyter-native agent loop"
"""How this project's summary begins: checkouts installed before the rename are distributions named ``agentkernel``
too, and are not foreign."""


def foreign_distribution() -> str | None:
    """One line naming the other project's distribution installed in this environment and the fix, else None."""
    others = [d for d in metadata.distributions(name=FOREIGN)
              if not (d.metadata["Summary"] or "").startswith(OWN_SUMMARY)]
    if not others:
        return None
    other = others[0]
    where = other.locate_file("")
    return (f"agentkernel: the distribution {FOREIGN} {other.version} (another project) is installed in {where} "
            f"and its module is also named agentkernel, so its files can replace this package's; fix: pip uninstall "
            f"{FOREIGN} && pip install --force-reinstall {DISTRIBUTION}")
