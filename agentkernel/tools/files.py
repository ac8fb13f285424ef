"""The built-in read-only tools ``read_file``, ``list_dir`` and ``search_text``, behind one path policy.

Every path a tool receives goes through :class:`PathPolicy`: it is taken relative to the project root (the
working directory at call time unless configured), its real path (symlinks resolved) must stay under that
root, and only UTF-8 text files of reasonable size are read. A path starting with ``agentkernel/`` that does
not exist under the root is read from the installed package instead, so the agent can read its own source::

    from agentkernel.tools.files import file_tools, read_file

    tools = file_tools("path/to/project")       # the three tools bound to that root
    read_file.fn("agentkernel/tools/files.py")     # this file, from any working directory

Paths in outputs and messages are always relative to the root, never absolute, so notebook outputs are the
same on every machine. Refusals are raised as exceptions; the loop shows their text to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..text import short, take_lines
from .base import MAX_OUTPUT_CHARS, Tool, tool
from .file_reading import SNIFF_BYTES, read_text_file, split_lines
from .file_search import search_files

__all__ = [
    "FILE_TOOL_NAMES", "MAX_FILE_BYTES", "MAX_OUTPUT_CHARS", "PACKAGE_DIR", "PathPolicy", "checked_text", "file_tools",
    "list_dir", "read_file", "search_text",  # noqa: F822 - made when first named (see __getattr__)
]

FILE_TOOL_NAMES = ("read_file", "list_dir", "search_text")
PACKAGE_DIR = Path(__file__).resolve().parents[1]
"""The installed ``agentkernel`` package, readable through paths starting with ``agentkernel/``."""

MAX_FILE_BYTES = 1_000_000
"""Files larger than this are only read in parts (offset/limit) and are skipped by search_text."""
"""No tool returns more text than this, so one call cannot flood the model's context."""
MAX_LIST_ENTRIES = 1000
MAX_MATCHES = 200
MAX_MATCH_LINE_CHARS = 300
MAX_PATTERN_CHARS = 1000
"""Longer search patterns are refused (compiling a pattern of millions of characters takes minutes)."""
SEARCH_SECONDS = 5.0
"""One search_text call stops after this long and says so, keeping the matches found until then."""
READ_CHUNK_BYTES = 1 << 20
"""read_file skips to an offset in a big file this many bytes at a time, whatever its line lengths."""
READ_PART_BYTES = 4 * MAX_OUTPUT_CHARS
"""The most bytes read_file takes from a big file after the offset: a full output even if every character
takes 4 bytes."""
SECRET_FILE_NAMES = frozenset({".env", ".netrc", "_netrc", ".pgpass", ".git-credentials"})
SECRET_FILE_SUFFIXES = (".pem", ".key")
_SSH_KEY = re.compile(r"id_(?:rsa|dsa|ecdsa|ed25519|ecdsa_sk|ed25519_sk|xmss)\b.*")
_CLOUD_CREDENTIALS = frozenset({"credentials", "credentials.json", "application_default_credentials.json"})
SKIPPED_DIRS = ("__pycache__",)
"""Directories search_text does not enter, besides hidden ones (.git, .venv, ...)."""


@dataclass(frozen=True)
class _Located:
    """A checked real path and the directory it was admitted under (the root or the package)."""

    path: Path
    base: Path
    prefix: str  # "" under the root, "agentkernel/" under the package

    def show(self, path: Path | None = None) -> str:
        """``path`` (default: the located one) relative to the root, as the model should see it."""
        relative = (path or self.path).relative_to(self.base).as_posix()
        if relative == ".":
            return self.prefix.rstrip("/") or "."
        return self.prefix + shown_name(relative)


class PathPolicy:
    """Decides which paths the built-in tools may read, and reads them.

    Paths are relative to ``root`` (default: the working directory at the time of each call; an explicit
    relative root is resolved once, here). Refused: ``..`` or absolute paths that leave the root, symlinks
    whose target is outside it, paths with NUL bytes, binary files (a NUL byte in the first 8 KiB, or not
    valid UTF-8), and whole reads of files over ``max_file_bytes``. A relative path starting with
    ``agentkernel/`` that does not exist under the root is looked up in the installed package, with the
    same checks against the package directory. One search stops after ``search_seconds``. Well-known secret files
    (:func:`is_secret_file`: ``.env``, keys, ``.netrc``, cloud credentials) are listed but neither read nor
    searched unless ``allow_secret_files``.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, *, max_file_bytes: int = MAX_FILE_BYTES,
                 search_seconds: float = SEARCH_SECONDS, allow_secret_files: bool = False):
        self._root = Path(root).resolve() if root is not None else None
        self.allow_secret_files = allow_secret_files
        self.max_file_bytes = max_file_bytes
        self.search_seconds = search_seconds

    @property
    def root(self) -> Path:
        """The resolved project root."""
        return self._root if self._root is not None else Path.cwd().resolve()

    def resolve(self, path: str) -> Path:
        """The real path of an existing file or directory that ``path`` may name; raise if it is refused."""
        return self._locate(path).path

    def _locate(self, path: str) -> _Located:
        if not isinstance(path, str):
            raise TypeError(f"path must be a string, got {type(path).__name__}")
        if "\0" in path:
            raise ValueError(f"path {path!r} contains a NUL byte")
        with _without_abspath(path or "."):  # e.g. "File name too long" from exists(), naming the absolute path
            return self._find(_os_name(path, self.root))

    def _find(self, path: str) -> _Located:
        root = self.root
        given = Path(path or ".")
        candidate = given if given.is_absolute() else root / given
        real = _resolve(candidate, path)
        inside = real.is_relative_to(root)
        if inside and real.exists():
            return _Located(real, root, "")
        # Self-inspection: agentkernel/... missing under the root is read from the installed package.
        parts = given.parts
        in_package_name = not given.is_absolute() and parts[:1] == (PACKAGE_DIR.name,)
        if in_package_name and not os.path.lexists(candidate):
            in_package = _resolve(PACKAGE_DIR.joinpath(*parts[1:]), path)
            if in_package.is_relative_to(PACKAGE_DIR) and in_package.exists():
                return _Located(in_package, PACKAGE_DIR, PACKAGE_DIR.name + "/")
        if not inside:
            raise PermissionError(f"path {path!r} is outside the project root")
        raise FileNotFoundError(f"no such file or directory: {path!r}")

    def _refuse_secrets(self, located: _Located, tool: str, given: str) -> None:
        """Raise if the file is a well-known secret file (by its own name or by its target's) and those are off."""
        if not self.allow_secret_files and (_holds_secrets(located.path) or is_secret_file(Path(given))):
            done = "searched" if tool == "search_text" else "read"
            raise PermissionError(f"{tool}: {located.show()} holds secrets and is not {done}; the model may use its "
                                  "variables by name")

    def _read_text(self, located: _Located) -> str:
        """A regular file's text if it is small enough; raise with the reason otherwise."""
        shown = located.show()
        if located.path.is_dir():
            raise IsADirectoryError(f"{shown!r} is a directory; use list_dir to see what it holds")
        if not located.path.is_file():
            raise ValueError(f"{shown!r} is not a regular file")
        with _without_abspath(shown):
            size = located.path.stat().st_size
        if size > self.max_file_bytes:
            raise ValueError(
                f"{shown!r} is {size:,} bytes, over the {self.max_file_bytes:,}-byte limit for reading it "
                "whole; pass offset and limit to read part of it (e.g. offset=1, limit=200)"
            )
        with _without_abspath(shown):
            try:
                return read_text_file(os.fspath(located.path), self.max_file_bytes)  # it may have grown
            except ValueError as e:
                raise ValueError(f"{shown!r} is {e}") from None

    # -- the tools (their docstrings are what the model reads) -----------------------------------------------

    def read_file(self, path: str, offset: int | None = None, limit: int | None = None) -> str:
        """Read a UTF-8 text file in the project and return its lines. Output is capped at 20,000 characters; when not every line is shown, a final note in square brackets says which lines were (e.g. "[lines 1-200 of 950; pass offset=201 for more]"). Binary files and directories are refused; files over 1 MB can only be read in parts with offset/limit.

        Args:
            path: File path relative to the project root, e.g. "src/app.py". "agentkernel/..." reads the agent's own source.
            offset: Number of the first line to return, counting from 1 (default 1).
            limit: Maximum number of lines to return (default: as many as fit in the output cap).
        """  # noqa: E501 - the first paragraph is the tool description the model sees, kept as one paragraph
        if offset is not None and offset < 0:
            raise ValueError("offset must be a line number counting from 1")
        if limit is not None and limit < 1:
            raise ValueError("limit must be at least 1")
        first = max(offset or 1, 1)
        located = self._locate(path)
        if located.path.is_file():
            self._refuse_secrets(located, "read_file", path)
        shown = located.show()
        partial = offset is not None or limit is not None
        if partial and located.path.is_file() and located.path.stat().st_size > self.max_file_bytes:
            with _without_abspath(shown):
                return _read_part(located.path, shown, first, limit)
        lines = split_lines(self._read_text(located))
        if not lines:
            return "[empty file]"
        if first > len(lines):
            raise ValueError(f"offset {first} is past the end of {shown!r}, which has {len(lines)} lines")
        window = lines[first - 1 : None if limit is None else first - 1 + limit]
        kept, cut = take_lines(window, MAX_OUTPUT_CHARS)
        last = first + len(kept) - 1
        text = "\n".join(kept)
        if cut is not None:
            return f"{text}\n[line {first} is {cut:,} characters; showing the first {MAX_OUTPUT_CHARS:,}]"
        if first == 1 and last == len(lines):
            return text
        more = f"; pass offset={last + 1} for more" if last < len(lines) else ""
        return f"{text}\n[lines {first}-{last} of {len(lines)}{more}]"

    def list_dir(self, path: str = ".") -> str:
        """List a directory in the project: one entry per line, sorted by name, directories marked with a trailing "/". Hidden entries are included; long listings are cut with a note.

        Args:
            path: Directory path relative to the project root (default: the root itself).
        """  # noqa: E501
        located = self._locate(path)
        if not located.path.is_dir():
            raise NotADirectoryError(f"{located.show()!r} is not a directory; use read_file to read a file")
        with _without_abspath(located.show()), os.scandir(located.path) as scan:
            entries = sorted(scan, key=lambda e: e.name)
        if not entries:
            return "[empty directory]"
        names = [shown_name(e.name) + ("/" if _is_dir(e) else "") for e in entries[:MAX_LIST_ENTRIES]]
        kept, _ = take_lines(names, MAX_OUTPUT_CHARS)
        text = "\n".join(kept)
        if len(kept) < len(entries):
            text += f"\n[showing {len(kept)} of {len(entries)} entries]"
        return text

    def search_text(self, pattern: str, path: str = ".") -> str:
        """Search the project's text files for a regular expression (Python syntax, case-sensitive), line by line. Searches one file, or every file under a directory recursively, skipping hidden directories such as .git, binary files and files over 1 MB. Returns "path:line: text" lines, at most 200 matches.

        Args:
            pattern: Regular expression to look for in each line; invalid expressions are searched as literal text.
            path: File or directory to search, relative to the project root (default: the whole project).
        """  # noqa: E501
        return self._search(pattern, path)

    def _search(self, pattern: str, path: str, cancelled: threading.Event | None = None) -> str:
        if len(pattern) > MAX_PATTERN_CHARS:
            raise ValueError(f"the pattern is {len(pattern):,} characters long; at most {MAX_PATTERN_CHARS:,} "
                             "are searched")
        header, regex = "", pattern
        try:
            re.compile(pattern)
        except (re.error, OverflowError) as e:  # OverflowError: a repeat count such as {4294967296}
            header = f"[{pattern!r} is not a valid regular expression ({e}); searched for it as literal text]"
            regex = re.escape(pattern)
        located = self._locate(path)
        explicit = not located.path.is_dir()
        if explicit and not located.path.is_file():
            raise ValueError(f"{located.show()!r} is not a regular file")
        if explicit:
            self._refuse_secrets(located, "search_text", path)
        deadline = time.monotonic() + self.search_seconds  # listing the files counts against the limit too
        files = [located.path] if explicit else self._listed(located, deadline, cancelled)
        secret = [] if explicit or self.allow_secret_files else [f for f in files if _holds_secrets(f)]
        if secret:
            files = [f for f in files if f not in secret]
        if time.monotonic() >= deadline:
            return (f"[search stopped at its {self.search_seconds:g}-second limit while listing the files under "
                    f"{located.show()!r} ({len(files):,} so far), before searching any: narrow the path]")
        found = search_files(regex, [os.fspath(f) for f in files], seconds=max(deadline - time.monotonic(), 0.1),
                             max_bytes=self.max_file_bytes, max_matches=MAX_MATCHES + 1,
                             line_chars=4 * MAX_MATCH_LINE_CHARS,  # short() below squeezes the whitespace
                             cancelled=cancelled)
        if explicit and found.skipped:
            raise ValueError(f"{located.show()!r} is {found.skipped[0]}")
        shown = [located.show(f) for f in files]
        matches = [f"{shown[i]}:{number}: {short(line, MAX_MATCH_LINE_CHARS)}" for i, number, line in found.matches]
        kept, _ = take_lines(matches[:MAX_MATCHES], MAX_OUTPUT_CHARS - 500)  # room for the notes
        lines = [header] if header else []
        stopped = " before the search was stopped" if found.timed_out else ""
        lines += kept or [f"no matches for {pattern!r} in {located.show()!r}{stopped}"]
        if len(kept) < len(matches):
            lines.append(f"[showing the first {len(kept)} matches; narrow the pattern or the path for more]")
        if found.skipped:
            lines.append(f"[skipped {len(found.skipped)} binary, oversized or unreadable files]")
        if secret:
            names = ", ".join(located.show(f) for f in secret[:5]) + ", ..." * (len(secret) > 5)
            lines.append(f"[not searched: {len(secret)} files that hold secrets ({names}); the model may use their "
                         "variables by name]")
        if found.timed_out:
            at = found.reached
            where = f" in {shown[at]!r} (file {at + 1} of {len(files)})" if at >= 0 else ""
            lines.append(f"[search stopped at its {self.search_seconds:g}-second limit{where}: the pattern is too "
                         "slow on this text (nested repeats such as (a+)+ backtrack exponentially); simplify it or "
                         "narrow the path]")
        return "\n".join(lines)

    def _listed(self, top: _Located, deadline: float, cancelled: threading.Event | None) -> list[Path]:
        """The files :meth:`_walk` yields, until the deadline or a cancel."""
        files = []
        for file in self._walk(top):
            files.append(file)
            if time.monotonic() >= deadline or (cancelled is not None and cancelled.is_set()):
                break
        return files

    def _walk(self, top: _Located) -> Iterator[Path]:
        """Files under a directory in sorted order, not entering hidden dirs nor following dir symlinks,
        and leaving out file symlinks whose target is outside the root (or the package)."""
        for dirpath, dirnames, filenames in os.walk(top.path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIPPED_DIRS)
            for name in sorted(filenames):
                file = Path(dirpath, name)
                try:
                    if file.is_symlink() and not file.resolve().is_relative_to(top.base):
                        continue
                except (OSError, RuntimeError):  # a symlink loop: nothing to read there
                    continue
                yield file


def is_secret_file(path: Path) -> bool:
    """Whether a file is one that well-known tools keep credentials in: ``.env`` and ``.env.*``, ``*.pem``,
    ``*.key``, private SSH keys (``id_rsa``, ``id_ed25519``, ... and any ``id_*`` under ``.ssh``; not ``*.pub``),
    ``.netrc``, ``.pgpass``, ``.git-credentials``, and ``credentials`` / ``credentials.json`` under ``.aws`` or
    ``.config/gcloud``."""
    name, parts = path.name, path.parts
    if name in SECRET_FILE_NAMES or name.startswith(".env.") or name.endswith(SECRET_FILE_SUFFIXES):
        return True
    if not name.endswith(".pub") and (_SSH_KEY.fullmatch(name) or name.startswith("id_") and ".ssh" in parts[:-1]):
        return True
    if name in _CLOUD_CREDENTIALS:
        folders = parts[:-1]
        return ".aws" in folders or any(folders[i:i + 2] == (".config", "gcloud") for i in range(len(folders)))
    return False


def checked_text(path: Path, base: Path | None, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The text of the file at ``path`` if the file tools' rules allow reading it: its real path (every link
    followed) under ``base`` (None: anywhere), not a secret file by its own name or its target's
    (:func:`is_secret_file`), a regular UTF-8 text file of at most ``max_bytes`` bytes (a FIFO is not waited on).
    Raise ValueError saying why not, in words that name no path and quote nothing of the file (instruction and
    skill files are read through this)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # RuntimeError: a link loop
        raise ValueError("it cannot be followed (a broken link or a link loop)") from None
    if base is not None and not real.is_relative_to(base.resolve()):
        raise ValueError("its real path is outside the project root (a link that leads out)")
    if is_secret_file(path) or is_secret_file(real):
        raise ValueError("it is a secret file, which the file tools do not read")
    try:
        return read_text_file(os.fspath(real), max_bytes)
    except ValueError as e:
        raise ValueError(f"it is {e}") from None
    except OSError as e:
        raise ValueError(f"it cannot be read ({e.strerror or type(e).__name__})") from None


def _holds_secrets(path: Path) -> bool:
    """:func:`is_secret_file` by the file's name or by its target's (a symlink to ``.env`` is ``.env``)."""
    try:
        return is_secret_file(path) or is_secret_file(path.resolve())
    except (OSError, RuntimeError):
        return is_secret_file(path)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a symlink loop or an unreadable target: list it as a plain entry
        return False


def _resolve(path: Path, given: str) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop; the message would hold the absolute path
        raise ValueError(f"path {given!r} cannot be resolved (a symlink loop?)") from None


@contextlib.contextmanager
def _without_abspath(shown: str) -> Iterator[None]:
    """Re-raise an OS error (permission denied, ...) naming the path as the model knows it, not the absolute one."""
    try:
        yield
    except OSError as e:
        if e.filename is None:
            raise
        raise type(e)(f"cannot read {shown!r}: {e.strerror or type(e).__name__}") from None


def _os_name(path: str, root: Path) -> str:
    """``path`` as ``os`` knows it: ``\\xNN`` escapes from :func:`shown_name` turned back into the bytes they
    stand for, unless a file by the literal name exists."""
    if "\\x" not in path or os.path.lexists(root / path):
        return path
    return re.sub(r"\\x([89a-f][0-9a-f])", lambda m: chr(0xDC00 + int(m[1], 16)), path)


def shown_name(name: str) -> str:
    """A file name as the model sees it: bytes that are not UTF-8 (which ``os`` hands over as lone surrogates,
    unencodable anywhere else) shown as ``\\xNN`` escapes, which the tools accept back in paths."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return name


def _read_part(path: Path, shown: str, first: int, limit: int | None) -> str:
    """Lines of a file too big to read whole. Holds at most one chunk and one output's worth of bytes at a time,
    however long its lines are (a 2 GB line is skipped a chunk at a time, never held)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        if b"\0" in f.read(SNIFF_BYTES):
            raise ValueError(f"{shown!r} is a binary file, not text")
        f.seek(0)
        data = f.read(READ_PART_BYTES + 1) if _skip_lines(f, first - 1) else b""
    more = len(data) > READ_PART_BYTES  # the file goes on past what was read
    *complete, tail = data[:READ_PART_BYTES].split(b"\n")
    if tail and not more:  # the file's last line, with no newline at its end
        complete.append(tail)
    if not complete:
        if not more:
            raise ValueError(f"offset {first} is past the end of {shown!r}")
        head = _decode_prefix(tail, shown)[:MAX_OUTPUT_CHARS]
        return (f"{head}\n[line {first} is longer than {READ_PART_BYTES:,} bytes; showing its first "
                f"{len(head):,} characters]")
    try:
        lines = [raw.decode("utf-8").removesuffix("\r") for raw in complete[:limit]]
    except UnicodeDecodeError:
        raise ValueError(f"{shown!r} is not UTF-8 text (binary?)") from None
    kept, cut = take_lines(lines, MAX_OUTPUT_CHARS)
    if cut is not None:
        return f"{kept[0]}\n[line {first} is {cut:,} characters; showing the first {MAX_OUTPUT_CHARS:,}]"
    last = first + len(kept) - 1
    note = f"[lines {first}-{last} of a {size:,}-byte file; pass offset={last + 1} for more]"
    return "\n".join(kept) + "\n" + note


def _skip_lines(f: BinaryIO, count: int) -> bool:
    """Move ``f`` past ``count`` newlines, reading a chunk at a time; False if the file ends first."""
    while count:
        chunk = f.read(READ_CHUNK_BYTES)
        if not chunk:
            return False
        newlines = chunk.count(b"\n")
        if newlines < count:
            count -= newlines
            continue
        end = -1
        for _ in range(count):
            end = chunk.index(b"\n", end + 1)
        f.seek(end + 1 - len(chunk), os.SEEK_CUR)
        return True
    return True


def _decode_prefix(data: bytes, shown: str) -> str:
    """The start of a UTF-8 text cut at any byte: a character cut in two at the end is left out."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.reason == "unexpected end of data":
            return data[: e.start].decode("utf-8")
        raise ValueError(f"{shown!r} is not UTF-8 text (binary?)") from None


def _relative_errors(method: Callable[..., str], policy: PathPolicy) -> Callable[..., str]:
    """``method`` with the absolute root (and package) path taken out of the message of any error it raises:
    the model names paths relative to the root, and a notebook output must not differ between machines."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> str:
        try:
            return method(*args, **kwargs)
        except Exception as e:
            message = str(e)
            bases = {str(PACKAGE_DIR): PACKAGE_DIR.name, str(policy.root): "."}
            relative = message
            for base, name in sorted(bases.items(), key=lambda b: -len(b[0])):  # the package may lie under the root
                if len(base) > 1:
                    relative = relative.replace(base + os.sep, "" if name == "." else name + "/").replace(base, name)
            if relative == message:
                raise
            try:
                error = type(e)(relative)
            except Exception:  # an exception type that wants other arguments
                error = ValueError(relative)
            raise error from None

    return call


def file_tools(root: str | os.PathLike[str] | PathPolicy | None = None, *,
               allow_secret_files: bool = False) -> list[Tool]:
    """The tools ``read_file``, ``list_dir`` and ``search_text`` bound to one :class:`PathPolicy`.

    ``root`` is the project root (default: the working directory at the time of each call), or a ready
    ``PathPolicy`` (e.g. with another ``max_file_bytes``). ``search_text`` is an async function (its search
    runs in a thread and a child process that a stopped run kills); the other two are plain functions.
    ``allow_secret_files`` lets them read well-known secret files (see :class:`PathPolicy`).
    """
    policy = root if isinstance(root, PathPolicy) else PathPolicy(root, allow_secret_files=allow_secret_files)
    read, list_, search = (_relative_errors(method, policy) for method in (policy.read_file, policy.list_dir,
                                                                            policy._search))

    @functools.wraps(policy.search_text)
    async def search_text(pattern: str, path: str = ".") -> str:
        cancelled = threading.Event()
        try:
            return await asyncio.to_thread(search, pattern, path, cancelled)
        finally:  # also when the run is stopped: the search process is killed at once, not at its time limit
            cancelled.set()

    # They cut their own output to MAX_OUTPUT_CHARS and then add a note saying what to ask for next: no second cut.
    return [tool(f, max_output_chars=None, anytime=True) for f in (read, list_, search_text)]


def __getattr__(name: str) -> Tool:
    """``read_file``, ``list_dir`` and ``search_text`` for the working directory, made when first named (making a
    tool imports pydantic, which ``%load_ext`` does not need)."""
    if name not in FILE_TOOL_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = dict(zip(FILE_TOOL_NAMES, file_tools(), strict=True))
    globals().update(made)
    return made[name]
