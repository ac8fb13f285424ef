"""The test tree: ``unit/`` runs in this process (fake HTTP servers and MCP servers it starts included),
``kernel/`` starts real kernels through jupyter_client, nbclient or papermill, ``browser/`` drives JupyterLab and
Notebook 7 in Chromium (marker ``browser``), ``realmodel/`` runs llama.cpp's server with a small real model
(marker ``realmodel``). ``support/`` holds what they share (the kernel client, the fake OpenAI server, the MCP
servers), put on ``sys.path`` here; ``jobs/``, ``mcp/`` and ``serve/`` are inputs (papermill notebooks, the npm MCP
server, the npm clients of ``%agent_serve``: the conformance suite, Claude Code and Node 22).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "support"))

# The course's checkpoint (tests/test_sampling_loop.py) re-exports three tests of unit/test_sampling_loop.py: run
# when named (`python -m pytest tests/test_sampling_loop.py`), left out of a run over the tree, where they run once.
collect_ignore = ["test_sampling_loop.py"]
