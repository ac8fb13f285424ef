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
look. Any run of :data:`PIECE_CHARS` bytes of a form is replaced as the whole form is, so a value cut anywhere is
still caught. The :class:`~agentkernel.tools.runner.ToolRunner` redacts every tool's result; transcripts, cassettes,
the model adapters' errors and the ``%%agent`` prompt use :func:`redact_text` and :func:`redact`, and the tools that
cut what they show redact it first. The set is current at every use (:attr:`KernelSecrets.current`).

Text the agent writes holds markers where it read secrets: :func:`restore` gives a marker its value back where the
text read held it, and refuses one anywhere else (:class:`MisplacedMarker`).
"""

from __future__ import annotations

import base64
import difflib
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
PIECE_CHARS = 16
"""A run this long of a secret's value (in any of its forms) is replaced wherever it stands, as the whole value is:
no tool's cut, window or line leaves one."""
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
MARKERS = re.compile(r"\[secret \$[^\]\s]*\]|\[redacted\]")
"""A marker (named or not) in text the model wrote."""
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
    def _index(self) -> tuple[dict[int, list[tuple[int, int]]], list[tuple[bytes, bytes]]]:
        """The forms of the secrets with their markers, and every form's 4-byte grams (as native ints) mapped to
        where they stand in it: the positions ``p`` with ``p % 12 < 4`` in a form of :data:`PIECE_CHARS` bytes or
        more (any piece of it is found), the first :data:`GRAM` positions in a shorter one (only all of it is)."""
        index: dict[int, list[tuple[int, int]]] = {}
        forms: list[tuple[bytes, bytes]] = []
        seen: set[bytes] = set()
        for name, value in self.secrets:
            shown = marker(name).encode()
            for form in sorted((f.encode("utf-8", "surrogatepass") for f in variants(value)), key=len, reverse=True):
                if form in seen:  # a value held under two names: the first name wins
                    continue
                seen.add(form)
                number = len(forms)
                forms.append((form, shown))
                positions = len(form) - GRAM + 1 if len(form) >= PIECE_CHARS else GRAM
                for k in range(GRAM):  # the grams at k, k + 4, ...: one array per alignment
                    grams = array("I", form[k:k + (len(form) - k) // GRAM * GRAM])
                    for gram, at in zip(grams, range(k, positions, GRAM), strict=False):
                        # A piece of 16 bytes covers 3 of the text's words, at positions p, p + 4, p + 8 of the
                        # form, and just one of those is < 4 modulo 12: indexing those finds every piece, in a third
                        # of the index and of the look-ups a text holding a secret costs.
                        if at % (3 * GRAM) < GRAM:
                            index.setdefault(gram, []).append((at, number))
        return index, forms

    def redact(self, text: str, *, shapes: bool = True) -> str:
        """``text`` with every secret replaced by its marker, and (``shapes``) key-shaped strings and URL
        credentials removed. A piece of a secret's form :data:`PIECE_CHARS` bytes long or longer is replaced as
        the whole form is, so a value cut anywhere (by a tool's summary, a window, a line) is still caught.

        One look at the text whatever the size of the set: an occurrence of a form (at least 8 bytes long), or of
        a piece of 16 bytes, covers one of the text's 4-byte words at a multiple of 4; the words are looked up in
        the index all at once (a set operation), and only a hit is checked, by growing it both ways.
        """
        if len(text) < MIN_SECRET_CHARS:  # shorter than any form of a secret, or any shape
            return text
        data = text.encode("utf-8", "surrogatepass")
        replaced = self._replaced(data, shapes)
        if not replaced:
            return text
        parts, end = [], 0
        for start, stop, shown in replaced:
            parts += [data[end:start], shown]
            end = stop
        parts.append(data[end:])
        return b"".join(parts).decode("utf-8", "surrogatepass")

    def pieces(self, text: str) -> tuple[str, list[tuple[int, int, str]]]:
        """:meth:`redact`'s text, and where in it each replacement stands with what it replaced: ``(start, end,
        original)`` (an empty span where a URL's credentials were dropped)."""
        data = text.encode("utf-8", "surrogatepass")
        parts: list[str] = []
        found, size, end = [], 0, 0
        for start, stop, shown in self._replaced(data, True):
            kept, marker_text = data[end:start].decode("utf-8", "surrogatepass"), shown.decode()
            parts += [kept, marker_text]
            size += len(kept)
            found.append((size, size + len(marker_text), data[start:stop].decode("utf-8", "surrogatepass")))
            size += len(marker_text)
            end = stop
        parts.append(data[end:].decode("utf-8", "surrogatepass"))
        return "".join(parts), found

    def _replaced(self, data: bytes, shapes: bool) -> list[tuple[int, int, bytes]]:
        """The spans of ``data`` to replace, in order and apart, with what replaces each."""
        spans = []
        index, forms = self._index
        if index:
            words = array("I", data + bytes(-len(data) % GRAM))
            hits = index.keys() & set(words)
            if hits:  # rarely any: then each place one is found is checked
                spans = _occurrences(data, hits, index, forms)
        if shapes:  # after the secrets: a named secret shaped like a key keeps its name (the sort below is stable)
            spans += [(m.start("userinfo"), m.end(), b"") if m.lastgroup == "userinfo"
                      else (m.start(), m.end(), MARKER_BYTES) for m in _SHAPES.finditer(data)]
        replaced: list[tuple[int, int, bytes]] = []
        for start, stop, shown in sorted(spans, key=lambda span: (span[0], -span[1])):
            if replaced and start < replaced[-1][1]:
                # Overlapping secrets are replaced together (by the first one's marker): no part of either is left.
                if stop > replaced[-1][1]:
                    replaced[-1] = (replaced[-1][0], stop, replaced[-1][2])
            else:  # leftmost first, the longest of those starting together
                replaced.append((start, stop, shown))
        return replaced

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
    """The kernel's one secret set, kept current: each use looks whether the environment or a named variable changed
    (a comparison taking under a microsecond), and only then is the set recomputed (and its index rebuilt)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._added: dict[str, str] = {}  # add(value, name)
        self._named: dict[str, Callable[[], object]] = {}  # %agent_secret NAME: read at each use
        self._configured: dict[str, str] = {}  # the run's model and MCP entries' keys
        self._env_names: tuple[str, ...] = ()  # %config AgentMagics.secret_env
        self._set = SecretSet()
        # What the set was made from, with it, replaced as one (threads call current and refresh too): the
        # environment as it was, what the named variables held, the environment's secrets and the names looked for.
        self._made: tuple[dict[Any, Any], tuple[object, ...], dict[str, str], tuple[str, ...], SecretSet] | None = None

    @property
    def current(self) -> SecretSet:
        """The set as it is now: recomputed only if the environment or a named variable changed since it last was
        (by anyone: a read-only tool, a background thread refreshing a token)."""
        made = self._made
        if made is not None and made[0] == _raw_environment() and (
                not self._named or _same(made[1], self._read_named())):
            return made[4]
        return self.refresh()

    def refresh(self) -> SecretSet:
        """Recompute the set from the environment and what was named; a new version only if it changed."""
        with self._lock:  # one at a time: a refresh that read the environment first must not land last
            snapshot = dict(_raw_environment())
            read = self._read_named()
            found = {name: value for name, value in zip(self._named, read, strict=False)
                     if isinstance(value, str) and len(value) >= MIN_SECRET_CHARS}
            made = self._made
            # Reading the environment's secrets costs ten times comparing it: only when it or the names changed.
            environment = made[2] if made is not None and made[0] == snapshot and made[3] == self._env_names \
                else environment_secrets(named=self._env_names)
            for source in (self._added, environment, self._configured):
                for name, value in source.items():
                    found.setdefault(name, value)
            secrets = tuple(found.items())
            if secrets != self._set.secrets:
                self._set = SecretSet(secrets, self._set.version + 1)
            self._made = (snapshot, read, environment, self._env_names, self._set)
            return self._set

    def _read_named(self) -> tuple[object, ...]:
        values = []
        for read in list(self._named.values()):
            try:
                values.append(read())
            except Exception:  # noqa: BLE001 - a variable deleted since it was named: nothing to hide there
                values.append(None)
        return tuple(values)

    def reference(self, name: str) -> str:
        """How code refers to the secret called ``name`` (``os.environ["GITHUB_TOKEN"]``), or "" if it cannot."""
        if name in os.environ:
            return f"os.environ[{json.dumps(name)}]"
        return f"the notebook variable {name}" if name in self._named and name.isidentifier() else ""

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
    """The kernel's secret set as it is now (see :attr:`KernelSecrets.current`)."""
    return KERNEL.current


def redact_text(text: str, also: Iterable[str | None] = ()) -> str:
    """``text`` with the kernel's secrets (and the values ``also``: a model's own key) replaced by their markers,
    key-shaped strings replaced by ``[redacted]`` and credentials in URLs dropped: one pass."""
    return KERNEL.current.with_values(also, "MODEL_KEY").redact(text)


def redact(value: Any, also: Iterable[str | None] = ()) -> Any:
    """:func:`redact_text` applied to every string inside a JSON-like value (dicts, lists)."""
    return KERNEL.current.with_values(also, "MODEL_KEY").redact_value(value)


class MisplacedMarker(ValueError):
    """Text the agent wrote holds a marker somewhere the text it read did not hold that secret."""


def restore(written: str, read: str = "", where: str = "the notebook") -> str:
    """What to write for ``written``, text the model wrote knowing ``read`` only redacted (an edited cell's old
    source; "" for new text): each marker that stands exactly where ``read`` held a secret (the texts aligned line by
    line, then character by character in changed lines) gets back what ``read`` held there, and the credentials
    dropped from a URL left as it was come back too. A marker anywhere else raises :class:`MisplacedMarker` saying
    why and what to use instead (``where`` names what cannot hold it): nothing is written with a marker over a
    value, and no value is lost."""
    shown, pieces = KERNEL.current.pieces(read) if read else ("", [])
    markers = list(MARKERS.finditer(written))
    if not markers and not pieces:
        return written
    blocks = _aligned(shown, written)
    back = {}
    for start, end, original in pieces:
        for i, j, size in blocks:
            if i <= start and end <= i + size and (start < end or i < start < i + size):
                back[j + start - i, j + end - i] = original
                break
    for found in markers:
        if found.span() not in back:
            raise MisplacedMarker(_misplaced(found.group(), where))
    parts, at = [], 0
    for (start, end), original in sorted(back.items()):
        parts += [written[at:start], original]
        at = end
    return "".join(parts) + written[at:]


def _misplaced(text: str, where: str) -> str:
    name = text[len(MARKER_START):-1] if text.startswith(MARKER_START) else ""
    use = KERNEL.reference(name) if name else ""
    instead = (f"use {use}" if use else "the value has no name code can read (not an environment or notebook "
               "variable): leave that text as it was, or ask the user")
    return (f"{text} is a marker, not the secret (only a marker kept exactly where the text read held that secret "
            f"gets its value back): {where} cannot hold a marker; {instead}")


def _aligned(old: str, new: str) -> list[tuple[int, int, int]]:
    """Blocks ``(i, j, size)`` with ``old[i:i + size] == new[j:j + size]``: the lines the texts share, then the
    characters shared within lines that changed (aligning lines first keeps the cost of a long cell down)."""
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    old_at, new_at = _starts(old_lines), _starts(new_lines)
    blocks = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes():
        if tag == "equal":
            blocks.append((old_at[i1], new_at[j1], old_at[i2] - old_at[i1]))
        elif tag == "replace":
            a, b = old[old_at[i1]:old_at[i2]], new[new_at[j1]:new_at[j2]]
            blocks += [(old_at[i1] + i, new_at[j1] + j, size)
                       for i, j, size in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
                       if size]
    return blocks


def _starts(lines: list[str]) -> list[int]:
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return starts


def _occurrences(data: bytes, hits: set[int], index: dict[int, list[tuple[int, int]]],
                 forms: list[tuple[bytes, bytes]]) -> list[tuple[int, int, bytes]]:
    """The spans of ``data`` holding a whole form, or a piece of :data:`PIECE_CHARS` bytes of a longer one, with the
    marker each is replaced by; ``hits`` are the words of ``data`` found in the index."""
    spans = []
    found: dict[tuple[int, int], tuple[int, int]] = {}  # (form, where it would start): the span grown there
    for word in hits:
        gram, at = word.to_bytes(GRAM, sys.byteorder), -1
        while (at := data.find(gram, at + 1)) >= 0:
            if at % GRAM:  # the words are those at multiples of 4
                continue
            for position, number in index[word]:
                known = found.get((number, at - position))
                if known is not None and known[0] <= at < known[1]:  # a word of a span already grown
                    continue
                form, shown = forms[number]
                start, end = _grown(data, at, form, position)
                found[number, at - position] = (start, end)
                if end - start == len(form) or (end - start >= PIECE_CHARS and len(form) >= PIECE_CHARS):
                    while start > 0 and 0x80 <= data[start] < 0xC0:  # whole characters (a piece may cut one)
                        start -= 1
                    while end < len(data) and 0x80 <= data[end] < 0xC0:
                        end += 1
                    spans.append((start, end, shown))
    return spans


def _grown(data: bytes, at: int, form: bytes, position: int) -> tuple[int, int]:
    """The span of ``data`` around ``at`` that agrees with ``form`` placed with its ``position`` at ``at``."""

    def longest(size: int, agree: Callable[[int], bool]) -> int:  # the most bytes that agree (a binary search)
        if agree(size):
            return size
        low, high = 0, size
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if agree(middle) else (low, middle)
        return low

    before = longest(min(at, position), lambda n: data[at - n:at] == form[position - n:position])
    after = longest(min(len(data) - at, len(form) - position),
                    lambda n: data[at:at + n] == form[position:position + n])
    return at - before, at + after


def _same(before: tuple[object, ...], now: tuple[object, ...]) -> bool:
    """Whether the named variables hold what they held: the same strings (an environment variable is read as a new
    one each time) or the very same objects (``==`` would ask a DataFrame for a truth value)."""
    return len(before) == len(now) and all(a is b or (type(a) is str and type(b) is str and a == b)
                                           for a, b in zip(before, now, strict=True))


def _raw_environment() -> Mapping[Any, Any]:
    """The bytes ``os.environ`` decodes on each access (comparing them is cheap: the values are the same objects
    until one is set), or ``os.environ`` itself where it keeps none."""
    raw = getattr(os.environ, "_data", None)
    return raw if isinstance(raw, dict) else os.environ


def _is_binary(mime: str) -> bool:
    return (mime.startswith("image/") and mime != "image/svg+xml") or mime == "application/pdf"


def without_credentials(url: str) -> str:
    """A URL safe to show: any ``user:password@`` part removed."""
    return _URL_USERINFO.sub(r"\g<scheme>", url)
