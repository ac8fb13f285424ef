"""The kernel tools: what the agent sees and does in the notebook's kernel (they need the IPython shell)."""

NOTEBOOK_TOOL_NAMES = ("read_notebook", "add_cell", "edit_cell")
"""The notebook tools (:mod:`.notebook_tools`)."""
KERNEL_TOOL_NAMES = ("list_variables", "inspect_variable", "last_error", *NOTEBOOK_TOOL_NAMES, "run_python")
"""The kernel tools of every run (:mod:`.tools`, and the notebook's). Named here, so that the options table can
list them without importing the tools at ``%load_ext``."""
