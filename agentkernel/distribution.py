"""Which distribution this package is: ``jupyter-agentkernel`` on the package index, imported as ``agentkernel``.

The index's ``agentkernel`` is another project, which also installs a top-level ``agentkernel`` package. Installed
into the same environment, the two write into one folder and the last install's files win. This package cannot
speak when the other one's ``agentkernel/__init__.py`` is the one Python finds (that code is not ours), so the check
lives where ours runs: :func:`foreign_distribution` tells ``%load_ext agentkernel`` that the other project is
installed beside it, and the message names the fix. It first lists the folders on ``sys.path`` for metadata
named agentkernel (well under a millisecond) and imports :mod:`importlib.metadata` (9 ms) only when some is there;
mapping every installed distribution to its modules would cost a quarter of a second at each ``%load_ext``.
"""

from __future__ import annotations

import os
import sys

DISTRIBUTION = "jupyter-agentkernel"
"""The name ``pip install`` takes."""
FOREIGN = "agentkernel"
"""The index's other project whose package is also called ``agentkernel``."""
OWN_SUMMARY = "A Jupyter-native agent loop"
"""How this project's summary begins: checkouts installed before the rename are distributions named ``agentkernel``
too, and are not foreign."""


def foreign_distribution() -> str | None:
    """One line naming the other project's distribution installed in this environment and the fix, else None."""
    if not any(_metadata_folders(folder) for folder in sys.path):
        return None  # nothing named agentkernel is installed: not worth importlib.metadata (9 ms) at %load_ext
    from importlib import metadata

    others = [d for d in metadata.distributions(name=FOREIGN)
              if not (d.metadata["Summary"] or "").startswith(OWN_SUMMARY)]
    if not others:
        return None
    other = others[0]
    where = other.locate_file("")
    return (f"agentkernel: the distribution {FOREIGN} {other.version} (another project) is installed in {where} "
            f"and its module is also named agentkernel, so its files can replace this package's; fix: pip uninstall "
            f"{FOREIGN} && pip install --force-reinstall {DISTRIBUTION}")


def _metadata_folders(folder: str) -> bool:
    """Whether ``folder`` (an entry of ``sys.path``) holds the metadata of a distribution named agentkernel
    (``agentkernel-0.9.5.dist-info``, ``agentkernel.egg-info``), as :mod:`importlib.metadata` would find it."""
    try:
        with os.scandir(folder or ".") as entries:
            return any(e.name.lower().startswith((f"{FOREIGN}-", f"{FOREIGN}."))
                       and e.name.lower().endswith((".dist-info", ".egg-info")) for e in entries)
    except OSError:  # not a folder (a zip file), or gone
        return False
