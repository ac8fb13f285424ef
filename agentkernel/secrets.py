"""Secrets stay in the kernel: the one set of values no output, prompt, panel, transcript or cassette may hold.

The kernel's set (:data:`KERNEL`) holds

- the values of environment variables whose names mark them as secrets (:func:`is_secret_name`: a ``_``-separated
  part, or the end of the name, is ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``, ``CREDENTIAL(S)``,
  ``PRIVATE`` or ``COOKIE``), unless the value is the path of an existing file or socket (``SSH_AUTH_SOCK``);
- the password of every URL in the environment (``postgres://user:PASSWORD@host/db``);
- the keys of the run's model and of the configured MCP entries (:meth:`KernelSecrets.configure`);
- what the user names: :func:`add` (``agentkernel.secrets.add(value, name="db")``), and environment variables or
  kernel variables named by ``%agent_secret NAME`` or ``%config AgentMagics.secret_env = [...]``.

Values shorter than :data:`MIN_SECRET_CHARS` are not secrets (replacing them everywhere would mangle ordinary
text). :func:`redact_text` replaces each value as written, URL-encoded, JSON/repr-escaped and base64-encoded (at
the three alignments a value can have inside a longer base64 text, so ``Authorization: Basic`` of ``user:value``
is caught) by ``[secret $NAME]``, in one look at the text whose cost does not grow with the number of secrets
(:meth:`SecretSet.redact`: an index of the forms, built once per version of the set; a regular expression
alternating them was measured first, and its cost per character grew tenfold from 10 to 100 secrets). Strings
shaped like OpenAI keys are replaced by ``[redacted]`` and ``user:password@`` in URLs is dropped, in the same
look. The :class:`~agentkernel.tools.runner.ToolRunner` redacts every tool's result; transcripts, cassettes, the
model adapters' errors and the ``%%agent`` prompt use :func:`redact_text` and :func:`redact`.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import os
import re
import sys
import threading
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_plus, unquote

from .text import map_strings

MARKER = "[redacted]"
"""What replaces a string shaped like an API key that is not in the set (so has no name)."""
MARKER_START = "[secret $"
MIN_SECRET_CHARS = 8
"""Shorter values are not treated as secrets (replacing them everywhere would mangle ordinary text)."""
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "PRIVATE", "COOKIE")
NEVER_SECRET = frozenset({"PWD", "OLDPWD", "JPY_SESSION_NAME", "XAUTHORITY"})
SECRETS_FRAME = (
    "Values shown as [secret $NAME] are secrets held in the kernel: code you run can use them by name (an "
    "environment variable, e.g. os.environ[\"NAME\"], or a notebook variable); never ask the user for them."
)
"""What the system prompt says once the model has been shown a marker (see :class:`agentkernel.loop.AgentLoop`)."""

MARKER_BYTES = MARKER.encode()
GRAM = 4
"""Bytes per word of the secrets' index: a form of at least 2 * GRAM - 1 bytes (every form: MIN_SECRET_CHARS)
covers a whole word of the text at a multiple of GRAM."""
assert array("I").itemsize == GRAM
# Strings shaped like OpenAI keys (``sk-...``, ``sess-...``), and the ``user:password@`` of URLs: the leading
# [sh] lets the regular expression engine skip every other character at C speed.
_SHAPES = re.compile(rb"[sh](?:(?<=\bs)(?:k|ess)-[A-Za-z0-9_\-*.]{6,}|(?<=h)ttps?://(?P<userinfo>[^/@\s]+@))")
_URL_USERINFO = re.compile(r"(?P<scheme>https?://)[^/@\s]+@")
_URL_PASSWORD = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@:]*:(?P<password>[^\s/@]+)@")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name marks its value as a secret (``GITHUB_TOKEN``, ``PGPASSWORD``)."""
    upper = name.upper()
    if upper in NEVER_SECRET:
        return False
    return upper.endswith(SECRET_WORDS) or any(part in SECRET_WORDS for part in upper.split("_"))


def is_secret_value(value: str) -> bool:
    """Whether a value is long enough to be a secret and not the path of an existing file or socket."""
    if len(value) < MIN_SECRET_CHARS:
        return False
    if "\n" in value or len(value) > 4096 or not (os.sep in value or "." in value):
        return True
    try:
        return not os.path.exists(value)
    except (OSError, ValueError):
        return True


def environment_secrets(environ: Mapping[str, str] | None = None,
                        named: Iterable[str] = ()) -> dict[str, str]:
    """The secrets of an environment by name: variables with a secret name or in ``named``, and URL passwords."""
    environ = os.environ if environ is None else environ
    wanted = set(named)
    found: dict[str, str] = {}
    for name, value in environ.items():
        if (name in wanted or is_secret_name(name)) and is_secret_value(value):
            found[name] = value
        elif "://" in value:
            for match in _URL_PASSWORD.finditer(value):
                password = unquote(match["password"])
                if is_secret_value(password):
                    found.setdefault(name, password)
    return found


def variants(value: str) -> set[str]:
    """The forms a value takes in text: as written, URL-encoded, JSON-, repr- and HTML-escaped, and base64-encoded
    at each of the three alignments (only the characters that do not depend on the bytes around it)."""
    forms = {value, quote(value, safe=""), quote(value), quote_plus(value), json.dumps(value)[1:-1],
             json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1], html.escape(value)}
    raw = value.encode("utf-8", "surrogatepass")
    for offset in range(3):
        start = -(-offset * 8 // 6)  # the first character whose bits all come from the value
        end = (offset + len(raw)) * 8 // 6  # past the last such character
        padded = bytes(offset) + raw + bytes(2)
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            core = encode(padded).decode("ascii")[start:end]
            forms.add(core)
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def marker(name: str) -> str:
    """What the model, the panel and every file see instead of the secret called ``name``."""
    return f"{MARKER_START}{name}]"


@dataclass(frozen=True)
class SecretSet:
    """Secrets by name (first name wins for a value held twice), with their one compiled redaction pass."""

    secrets: tuple[tuple[str, str], ...] = ()
    version: int = 0

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(name for name, _ in self.secrets))

    def __len__(self) -> int:
        return len(self.secrets)

    @functools.cached_property
    def _index(self) -> dict[int, list[tuple[int, bytes, bytes]]]:
        """Every form of every secret under each of its first :data:`GRAM` 4-byte grams (as native ints)."""
        index: dict[int, list[tuple[int, bytes, bytes]]] = {}
        seen: set[bytes] = set()
        for name, value in self.secrets:
            shown = marker(name).encode()
            for form in sorted((f.encode("utf-8", "surrogatepass") for f in variants(value)), key=len, reverse=True):
                if form in seen:  # a value held under two names: the first name wins
                    continue
                seen.add(form)
                for k in range(GRAM):
                    index.setdefault(int.from_bytes(form[k:k + GRAM], sys.byteorder), []).append((k, form, shown))
        return index

    def redact(self, text: str, *, shapes: bool = True) -> str:
        """``text`` with every secret replaced by its marker, and (``shapes``) key-shaped strings and URL
        credentials removed.

        One look at the text whatever the size of the set: an occurrence of a form (at least 8 bytes long) covers
        one of the text's 4-byte words at a multiple of 4, at one of 4 offsets into the form; the words are looked
        up in the index all at once (a set operation), and only a hit is checked byte by byte.
        """
        if len(text) < MIN_SECRET_CHARS:  # shorter than any form of a secret, or any shape
            return text
        data = text.encode("utf-8", "surrogatepass")
        spans = []
        index = self._index
        if index:
            words = array("I", data + bytes(-len(data) % GRAM))
            for word in index.keys() & set(words):  # rarely any: then each place it is found is checked
                gram, at = word.to_bytes(GRAM, sys.byteorder), -1
                while (at := data.find(gram, at + 1)) >= 0:
                    if at % GRAM:  # the words are those at multiples of 4
                        continue
                    for k, form, shown in index[word]:
                        if at >= k and data.startswith(form, at - k):
                            spans.append((at - k, at - k + len(form), shown))
        if shapes:  # after the secrets: a named secret shaped like a key keeps its name (the sort below is stable)
            spans += [(m.start("userinfo"), m.end(), b"") if m.lastgroup == "userinfo"
                      else (m.start(), m.end(), MARKER_BYTES) for m in _SHAPES.finditer(data)]
        if not spans:
            return text
        parts, end = [], 0
        for start, stop, shown in sorted(spans, key=lambda span: (span[0], -span[1])):
            if start >= end:  # leftmost first, the longest of those starting together
                parts += [data[end:start], shown]
            # Overlapping secrets are replaced together (by the first one's marker): no part of either is left.
            end = max(end, stop)
        parts.append(data[end:])
        return b"".join(parts).decode("utf-8", "surrogatepass")

    def redact_value(self, value: Any) -> Any:
        """:meth:`redact` applied to every string inside a JSON-like value (dicts, lists)."""
        return map_strings(value, self.redact)

    def redact_bundle(self, data: dict[str, Any]) -> dict[str, Any]:
        """A display's MIME bundle with every text part redacted (text/plain, text/html, JSON, SVG, ...); base64
        data (``image/png`` and the other raster images, PDF) is left as it is: it is not text, and a key found in
        it by chance would be a coincidence that redacting would turn into a broken image."""
        return {mime: value if _is_binary(mime) else self.redact_value(value) for mime, value in data.items()}

    def holds(self, value: str) -> bool:
        return any(value == secret for _, secret in self.secrets)

    def with_values(self, values: Iterable[str | None], name: str) -> SecretSet:
        """This set and ``values`` (those not in it yet, called ``name``); itself when there are none."""
        extra = tuple((name, v) for v in dict.fromkeys(values)
                      if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS and not self.holds(v))
        return _extended(self, extra) if extra else self


@functools.lru_cache(maxsize=32)
def _extended(base: SecretSet, extra: tuple[tuple[str, str], ...]) -> SecretSet:
    return SecretSet(base.secrets + extra, base.version)


class KernelSecrets:
    """The kernel's one secret set, recomputed (and its pattern recompiled) only when what it is made of changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._added: dict[str, str] = {}  # add(value, name)
        self._named: dict[str, Callable[[], object]] = {}  # %agent_secret NAME: read at each refresh
        self._configured: dict[str, str] = {}  # the run's model and MCP entries' keys
        self._env_names: tuple[str, ...] = ()  # %config AgentMagics.secret_env
        self._set = SecretSet()
        self._fresh = False
        self._environment: tuple[object, tuple[str, ...], dict[str, str]] | None = None  # (snapshot, names, found)

    @property
    def current(self) -> SecretSet:
        """The set as last computed (computed now if it never was)."""
        return self._set if self._fresh else self.refresh()

    def refresh(self) -> SecretSet:
        """Recompute the set from the environment and what was named; a new version only if it changed."""
        found: dict[str, str] = {}
        for name, read in list(self._named.items()):
            try:
                value = read()
            except Exception:  # noqa: BLE001 - a variable deleted since it was named: nothing to hide there
                continue
            if isinstance(value, str) and len(value) >= MIN_SECRET_CHARS:
                found[name] = value
        for source in (self._added, self._environment_secrets(), self._configured):
            for name, value in source.items():
                found.setdefault(name, value)
        secrets = tuple(found.items())
        with self._lock:
            if secrets != self._set.secrets:
                self._set = SecretSet(secrets, self._set.version + 1)
            self._fresh = True
            return self._set

    def _environment_secrets(self) -> dict[str, str]:
        """:func:`environment_secrets`, looked at again only when the environment or the names changed (copying and
        comparing the environment costs a few microseconds; reading it, ten times more)."""
        raw = getattr(os.environ, "_data", None)  # the bytes os.environ decodes on each access
        snapshot = dict(raw) if isinstance(raw, dict) else dict(os.environ)
        if self._environment is None or self._environment[:2] != (snapshot, self._env_names):
            self._environment = (snapshot, self._env_names, environment_secrets(named=self._env_names))
        return self._environment[2]

    def add(self, value: str, name: str = "secret") -> str:
        """Treat ``value`` as a secret shown as ``[secret $name]``; returns the marker. A value shorter than
        :data:`MIN_SECRET_CHARS` characters raises ``ValueError``."""
        if not isinstance(value, str):
            raise TypeError(f"a secret is a string, not a {type(value).__name__}")
        if len(value) < MIN_SECRET_CHARS:
            raise ValueError(f"{name}: a value shorter than {MIN_SECRET_CHARS} characters is not treated as a secret")
        self._added[name] = value
        self.refresh()
        return marker(name)

    def name(self, name: str, read: Callable[[], object]) -> None:
        """Keep the value ``read()`` gives (an environment or kernel variable) secret, read again at each refresh."""
        self._named[name] = read
        self.refresh()

    def configure(self, *, keys: Mapping[str, str | None] | None = None, env_names: Iterable[str] = ()) -> SecretSet:
        """At a run's start: the keys of its model and MCP entries (by name; None keeps those configured before)
        and the ``secret_env`` names."""
        if keys is not None:
            self._configured = {n: v for n, v in keys.items() if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS}
        self._env_names = tuple(env_names)
        return self.refresh()

    def clear(self) -> None:
        """Forget what was added, named and configured (the environment's secrets stay)."""
        self._added.clear()
        self._named.clear()
        self._configured.clear()
        self._env_names = ()
        self.refresh()


KERNEL = KernelSecrets()
"""The kernel's secret set: one per process, as the environment is."""


def add(value: str, name: str = "secret") -> str:
    """Treat ``value`` as a secret of this kernel, shown as ``[secret $name]`` on every road out; returns the
    marker. ``agentkernel.secrets.add(db_password, name="db_password")``."""
    return KERNEL.add(value, name)


def current() -> SecretSet:
    """The kernel's secret set as last computed."""
    return KERNEL.current


def redact_text(text: str, also: Iterable[str | None] = ()) -> str:
    """``text`` with the kernel's secrets (and the values ``also``: a model's own key) replaced by their markers,
    key-shaped strings replaced by ``[redacted]`` and credentials in URLs dropped: one pass."""
    return KERNEL.current.with_values(also, "MODEL_KEY").redact(text)


def redact(value: Any, also: Iterable[str | None] = ()) -> Any:
    """:func:`redact_text` applied to every string inside a JSON-like value (dicts, lists)."""
    return KERNEL.current.with_values(also, "MODEL_KEY").redact_value(value)


def _is_binary(mime: str) -> bool:
    return (mime.startswith("image/") and mime != "image/svg+xml") or mime == "application/pdf"


def without_credentials(url: str) -> str:
    """A URL safe to show: any ``user:password@`` part removed."""
    return _URL_USERINFO.sub(r"\g<scheme>", url)
