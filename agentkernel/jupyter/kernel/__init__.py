"""The kernel tools: what the agent sees and does in the notebook's kernel (they need the IPython shell)."""
