"""The base of the magics other than ``%%agent``: a ``Magics`` bound to the kernel's shared state."""

from __future__ import annotations

from typing import Any

from IPython.core.magic import Magics

from ..kernel_state import Awaited, KernelState


class StateMagics(Magics):
    """Magics that read the kernel's :class:`KernelState` (and through it the ``%config AgentMagics`` settings), and
    give it their awaited forms (:meth:`awaited_forms`) for the input transformer's one awaited entry."""

    def __init__(self, shell: Any, state: KernelState, **kwargs: Any):
        super().__init__(shell, **kwargs)
        self.state = state
        state.awaited.update(self.awaited_forms())

    def awaited_forms(self) -> dict[str, Awaited]:
        """This class's awaited magics by name: what a cell holding only that magic is rewritten to await."""
        return {}
