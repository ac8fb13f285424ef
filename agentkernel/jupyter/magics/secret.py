"""``%agent_secret NAME...``: keep an environment or notebook variable's value from the model."""

from __future__ import annotations

import os
from collections.abc import Callable

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class

from ...secrets import KERNEL, MIN_SECRET_CHARS, marker
from .shared import StateMagics


@magics_class
class SecretMagics(StateMagics):
    """``%agent_secret``."""

    @line_magic
    def agent_secret(self, line: str) -> None:
        """Keep the value of an environment variable or notebook variable from the model: ``%agent_secret NAME``
        (several names may follow). The model, the panel, transcripts and cassettes see ``[secret $NAME]``; the
        value stays usable by name in the kernel. Alone, ``%agent_secret`` lists the names kept secret (never the
        values)."""
        names = line.split()
        if not names:
            secret_env = self.state.merge(self.state.parser.parse_args([])).secret_env
            self.state.note_short(secret_env)
            secrets = KERNEL.configure(env_names=secret_env)
            listed = ", ".join(sorted(secrets.names)) or "none"
            print(f"secrets kept from the model ({len(secrets.names)}): {listed}")
            return
        for name in names:
            print(self.name_secret(name))

    def name_secret(self, name: str) -> str:
        """Add the environment or notebook variable ``name`` to the kernel's secrets; what became of it."""
        namespace = self.state.user_ns
        if name in os.environ:
            value: object = os.environ[name]
            read: Callable[[], object] = lambda: os.environ.get(name)  # noqa: E731 - read again at each run
            where = "environment variable"
        elif name in namespace:
            value, read, where = namespace[name], lambda: self.state.user_ns.get(name), "notebook variable"
        else:
            raise UsageError(f"%agent_secret {name}: there is no environment variable or notebook variable {name}")
        if not isinstance(value, str):
            raise UsageError(f"%agent_secret {name}: the {where} {name} is a {type(value).__name__}, not a string")
        KERNEL.name(name, read)
        if len(value) < MIN_SECRET_CHARS:
            return (f"the {where} {name} is shorter than {MIN_SECRET_CHARS} characters: it is not treated as a "
                    "secret (it would be replaced wherever those characters occur)")
        return f"the {where} {name} is kept secret: the model sees {marker(name)}"
