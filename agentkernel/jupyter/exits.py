"""During a run, ``exit()`` and ``quit()`` in the notebook raise ``SystemExit`` instead of ending the kernel.

In a kernel, ``exit`` is IPython's exiter: it does not raise, it asks the kernel to shut down (0.1 s later). A
``@tool`` defined in the notebook, or code the agent runs there, that calls it would end the kernel in the middle of
the run. For the run's length the names are bound to ``sys.exit``, as in a plain script, so the call fails like any
tool and the loop shows the model an error output.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["exit_refused"]


@contextlib.contextmanager
def exit_refused(shell: Any) -> Iterator[None]:
    """Bind ``exit`` and ``quit`` in the shell's namespace to ``sys.exit`` where they are its exiter; then back."""
    namespace, exiter = shell.user_ns, shell.exiter
    swapped = [name for name in ("exit", "quit") if namespace.get(name) is exiter]
    for name in swapped:
        namespace[name] = sys.exit
    try:
        yield
    finally:
        for name in swapped:
            if namespace.get(name) is sys.exit:  # unless the user rebound the name meanwhile
                namespace[name] = exiter
