"""What a run's code did to a namespace, and taking it back: the journal behind ``%agent_undo``'s variables.

No IPython here: the namespace is a plain dict. Around each piece of code a run executes in it::

    journals = Journals(budget=256 * 2**20)
    journal = journals.run(run_id)
    call = journal.before(namespace, source)     # what the code can reach, copied within the budget
    exec(source, namespace)
    changes = journal.after(namespace, call)     # [Change("df", "in place"), Change("tmp", "new")]
    ...
    outcome = journal.undo(namespace)            # the namespace as it was before the run, what was left and why

**What the code can reach** is read from its syntax (:func:`reach`): every name it loads, stores or deletes, at any
depth (comprehensions, lambdas, nested functions, f-strings, ``global``, imports, ``except ... as``, ``match``
captures), and the names used by the code of the notebook's own functions, classes and instances it names
(transitively), since calling ``f()`` may change what ``f`` uses. Code that reaches the namespace by other roads
(``exec``, ``eval``, ``globals()``, ``locals()``, ``vars()``, ``get_ipython()`` and the magics and shell commands that
become it, ``__import__``, ``sys.modules``, ``import __main__``, ``from m import *``) is *dynamic*: every binding of the
namespace is compared before and after it (references, no copies), while contents are copied only for the names it
writes out. Over-approximating costs only copies, within the budget.

**In-place changes cost what is touched.** Before the code runs, each object one of those names holds is copied
(``copy.deepcopy``: ``ndarray.copy()`` and ``DataFrame.copy(deep=True)`` underneath) if its estimated size (read
cheaply, before copying: ``nbytes``, pandas' shallow ``memory_usage``, ``sys.getsizeof`` over a bounded sample of a
container) fits in what is left of the budget; immutable values, modules, functions and classes are not copied.
After it, a fingerprint (a CRC of the object's pickle, its array buffers read in place) says which objects really
changed; only their copies are kept. An object the code never names is never copied. Objects that cannot be copied
(open files, sockets, generators, locks, GPU tensors, anything ``deepcopy`` refuses) are named instead.

**Undo** (:meth:`Journal.undo`): a name the run created is removed, a rebound or deleted one gets its old object
back, an object changed in place gets its old contents back in place (``list[:] = old``, ``dict.clear(); update``,
an array's or a frame's contents assigned back), so that other names holding it see it too; where that is not
possible the name is bound to the copy and the outcome says so. A name (or an object) changed since the run (its
identity or fingerprint is not what the run left) is left as it is and named. Nested objects inside a restored
container come back as copies.

The budget bounds the copies the kernel keeps, all runs together: a new run may use all of it, and older runs'
copies are dropped, oldest first, to make room (those runs then name the objects they can no longer restore).
"""

from __future__ import annotations

import ast
import copy
import functools
import io
import itertools
import pickle
import socket
import sys
import threading
import time
import types
import zlib
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable, Iterator, Set
from dataclasses import dataclass, field
from typing import Any, Literal

from .tools.base import Display

DEFAULT_BUDGET = 256 * 2**20
"""Bytes of copies the kernel keeps for undoing runs (``%config AgentMagics.undo_budget``)."""
MAX_RUNS = 20
"""How many runs' journals are kept (the oldest is forgotten first, and the old objects it kept alive with it)."""
SAMPLE = 200
"""Elements of a container whose sizes are added up when its size is estimated (the rest extrapolated)."""
MAX_FOLLOWED = 500
"""Functions and classes whose code is read to widen what a piece of code can reach."""
CHANGES_MIME = "application/vnd.agentkernel.changes+json"
"""The display a ``run_python`` call's result carries naming the variables it changed (:func:`changes_display`)."""

DYNAMIC_NAMES = frozenset({"exec", "eval", "globals", "locals", "vars", "get_ipython", "__import__", "__builtins__",
                           "__main__"})
"""Names whose use lets code reach any variable without naming it."""

How = Literal["new", "rebound", "deleted", "in place"]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""A name that is not bound."""


# -- what code can reach ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reach:
    """The names a piece of code can reach."""

    names: frozenset[str]
    """Every name it loads, stores or deletes (over-approximated: a local of a nested function counts too)."""
    order: tuple[str, ...] = ()
    """The names in the order the code first writes them (those found in the code of functions it calls after)."""
    dynamic: str = ""
    """Why it may reach any name without naming it (``"exec"``, ``"globals()"``, ...), or empty."""


def reach(code: str | Iterable[types.CodeType]) -> Reach:
    """The names ``code`` can reach: its source (plain Python: IPython syntax already transformed; unparsable code,
    which will not run, reaches nothing) or the code objects compiled from it.

    They are read from the compiled code: every name a code object and the code nested in it (functions, lambdas,
    comprehensions, classes) loads, stores or deletes as a global or a name is in its ``co_names`` (with the
    attribute names, which only widen it), in the order the code first uses them."""
    if isinstance(code, str):
        try:
            code = [compile(code, "<code>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)]
        except (SyntaxError, ValueError):
            return Reach(frozenset())
    return _reach(tuple(code))


@functools.lru_cache(maxsize=256)  # code objects compare by what they do (not their file name): an agent's code
def _reach(codes: tuple[types.CodeType, ...]) -> Reach:  # that runs again, compiled again, is read once
    todo = list(codes)
    if len(todo) == 1 and not any(isinstance(c, types.CodeType) or c == ("*",) for c in todo[0].co_consts):
        plain = todo[0].co_names  # the common case: one piece of code, nothing nested
        return Reach(frozenset(plain), plain, _dynamic(frozenset(plain)))
    names: dict[str, None] = {}
    star = False
    while todo:
        one = todo.pop(0)
        names.update(dict.fromkeys(one.co_names))
        for const in one.co_consts:
            if isinstance(const, types.CodeType):
                todo.append(const)
            elif const == ("*",):
                star = True
    return Reach(frozenset(names), tuple(names), _dynamic(names.keys(), star))


def _dynamic(names: Set[str], star: bool = False) -> str:
    """How code using ``names`` reaches names without naming them, or empty."""
    if star:
        return "from ... import *"
    if DYNAMIC_NAMES.isdisjoint(names) and "modules" not in names:
        return ""
    if "modules" in names and "sys" in names:
        return "sys.modules"
    used = names & DYNAMIC_NAMES
    if not used:
        return ""
    first = min(used)
    return f"{first}()" if first in ("globals", "locals", "get_ipython", "vars") else first


def widen(namespace: dict[str, Any], found: Reach) -> Reach:
    """``found`` with the names used by the code of the notebook's functions, classes and instances it names,
    followed transitively (calling ``f()`` reaches what ``f`` uses)."""
    todo = [value for name in found.names if (value := namespace.get(name, MISSING)) is not MISSING
            and (type(value) in _FOLLOWED or type(value).__module__ == "__main__")]
    if not todo:
        return found
    names = set(found.names)
    dynamic = found.dynamic
    seen: set[int] = set()
    while todo and len(seen) < MAX_FOLLOWED:
        value = todo.pop()
        for code in _codes(value, namespace, seen):
            used = _code_names(code)
            if not dynamic and (how := _dynamic(used)):
                dynamic = f"{how} in {code.co_name}"
            new = used - names
            names |= new
            todo.extend(namespace[name] for name in new if name in namespace)
    return Reach(frozenset(names), found.order + tuple(sorted(names - found.names)), dynamic)


_FOLLOWED = (types.FunctionType, types.MethodType, type)


def _codes(value: Any, namespace: dict[str, Any], seen: set[int]) -> Iterator[types.CodeType]:
    """The code objects of the notebook's own function, method, class or instance ``value`` (not seen before)."""
    if isinstance(value, types.MethodType):
        value = value.__func__
    if not isinstance(value, (types.FunctionType, type)):
        kind = type(value)
        if kind.__module__ != "__main__" or isinstance(value, type):
            return
        value = kind
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, types.FunctionType):
        if value.__globals__ is namespace:
            yield value.__code__
        return
    if value.__module__ != "__main__":
        return
    for klass in value.__mro__:
        for member in list(vars(klass).values()):
            member = getattr(member, "__func__", member)  # staticmethod, classmethod
            if isinstance(member, property):
                member = member.fget
            if isinstance(member, types.FunctionType) and member.__globals__ is namespace:
                yield member.__code__


@functools.lru_cache(maxsize=1024)  # a notebook function's code is read at every call that names it
def _code_names(code: types.CodeType) -> frozenset[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return frozenset(names)


# -- objects: kinds, sizes, copies, fingerprints ------------------------------------------------------------------

_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), range, type(Ellipsis), slice)
_SCALARS = frozenset({int, float, complex, str, bytes, bool, type(None)})
_CONTAINERS = frozenset({list, dict, set, tuple, frozenset, deque, bytearray})
_FLAT = frozenset({list, dict, set, bytearray})
_CODE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type,
         types.MethodWrapperType, types.WrapperDescriptorType)
_UNCOPYABLE: tuple[tuple[type, str], ...] = (
    (io.IOBase, "an open file or stream"),
    (socket.socket, "a socket"),
    (types.GeneratorType, "a generator"),
    (types.CoroutineType, "a coroutine"),
    (types.AsyncGeneratorType, "an async generator"),
    (type(threading.Lock()), "a lock"),
    (type(threading.RLock()), "a lock"),
    (threading.Thread, "a thread"),
    (memoryview, "a memoryview"),
)


def uncopyable(value: Any) -> str:
    """Why ``value`` is not copied (``"an open file or stream"``, ``"a GPU tensor"``), or empty."""
    if type(value) in _CONTAINERS:
        return ""
    for kind, why in _UNCOPYABLE:
        if isinstance(value, kind):
            return why
    module = type(value).__module__.split(".")[0]
    if module in ("torch", "cupy", "jax", "jaxlib", "tensorflow") and _on_device(value):
        return "a GPU tensor"
    return ""


def _on_device(value: Any) -> bool:
    if getattr(value, "is_cuda", False) or module_of(value) == "cupy":
        return True
    device = getattr(value, "device", None)
    return device is not None and "cpu" not in str(device).lower()


def module_of(value: Any) -> str:
    return type(value).__module__.split(".")[0]


def is_immutable(value: Any, depth: int = 3) -> bool:
    """Whether ``value`` cannot change in place (scalars, strings, tuples and frozensets of such)."""
    if type(value) in _IMMUTABLE or isinstance(value, _IMMUTABLE):
        return True
    if isinstance(value, (tuple, frozenset)) and depth > 0 and len(value) <= SAMPLE:
        return all(is_immutable(item, depth - 1) for item in value)
    return False


def is_code(value: Any) -> bool:
    """Modules, functions, methods and classes: their bindings are journaled, their insides are not copied."""
    return isinstance(value, _CODE)


def estimate_size(value: Any) -> int:
    """Bytes ``value`` holds, estimated without copying it or visiting all of a large container."""
    kind = type(value)
    if kind in _CONTAINERS and len(value) <= 16:  # a small flat container, the common case: at once
        items = value.values() if kind is dict else value
        if all(type(item) in _SCALARS for item in items):
            return sys.getsizeof(value) + sum(map(sys.getsizeof, items)) * (1 + (kind is dict))
    return _size(value, set(), 4)


def _size(value: Any, seen: set[int], depth: int) -> int:
    if id(value) in seen:
        return 0
    seen.add(id(value))
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        size = int(value.nbytes)
        if value.dtype == object and value.size:
            size += _sampled(value.flat, int(value.size), seen, depth)
        return size
    if module_of(value) == "pandas" and hasattr(value, "memory_usage"):
        try:
            usage = value.memory_usage(deep=False)
            return int(getattr(usage, "sum", lambda: usage)())
        except Exception:
            return sys.getsizeof(value)
    try:
        size = sys.getsizeof(value)
    except Exception:
        size = 64
    if depth <= 0 or isinstance(value, _IMMUTABLE) or is_code(value):
        return size
    if isinstance(value, dict):
        return size + _sampled(itertools.chain.from_iterable(value.items()), 2 * len(value), seen, depth)
    if isinstance(value, (list, tuple, set, frozenset, deque)):
        return size + _sampled(iter(value), len(value), seen, depth)
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return size + _size(attributes, seen, depth - 1)
    return size


def _sampled(items: Iterator[Any], total: int, seen: set[int], depth: int) -> int:
    sample = list(itertools.islice(items, SAMPLE))
    if not sample:
        return 0
    size = sum(_size(item, seen, depth - 1) for item in sample)
    return size * total // len(sample)


def fingerprint(value: Any) -> Hashable | None:
    """A cheap digest of ``value``'s contents: equal before and after unless it changed (None: it cannot be read).

    The CRC of its pickle, with array buffers (NumPy, pandas) passed out of band and read in place; for a small flat
    list, dict, set or bytearray of ints, short strings and the like (:func:`_flat_print`), its items themselves."""
    if (flat := _flat_print(value)) is not None:
        return flat
    try:
        data, buffers = _pickled(value)
    except Exception:
        return None
    return _digest(value, data, buffers)


_EXACT = frozenset({int, bool, type(None), str, bytes})
"""Scalars whose equality, with their type, is identity of contents (not floats: ``-0.0 == 0.0``, ``nan != nan``)."""


def _flat_print(value: Any) -> Hashable | None:
    """The fingerprint of a small flat container whose items compare exactly (:data:`_EXACT`, strings and bytes of
    at most 256, since the fingerprint holds them): its type and items with their types; else None. Cheaper than a
    pickle for the small objects most calls touch; never equal to a pickle's digest (another shape)."""
    kind = type(value)
    if kind not in _FLAT or len(value) > 16:
        return None
    if kind is bytearray:
        return kind, bytes(value)
    items = (*value.keys(), *value.values()) if kind is dict else tuple(value)
    types = tuple(map(type, items))
    if not _EXACT.issuperset(types) or any(len(item) > 256 for item in items if type(item) in (str, bytes)):
        return None
    if kind is set:
        return kind, frozenset(zip(types, items, strict=True))
    return kind, types, items


def snapshot(value: Any, size: int | None = None) -> tuple[Any, Hashable | None, int]:
    """A copy of ``value``'s contents, its fingerprint and the bytes the copy holds, from one pickle of it (its array
    buffers copied once); where it does not pickle, ``copy.deepcopy`` (no fingerprint). Raises what copying raises.
    ``size``: :func:`estimate_size` of ``value`` if known (the size of a small flat container's copy)."""
    if (flat := _flat_print(value)) is not None:  # its items are immutable: a shallow copy is a deep one
        return value.copy(), flat, estimate_size(value) if size is None else size
    try:
        data, buffers = _pickled(value)
    except Exception:
        duplicate = copy.deepcopy(value)
        return duplicate, None, max(estimate_size(value), estimate_size(duplicate))
    if type(value) in _FLAT and len(value) <= 16 and all(  # a small flat container: its shallow copy is a deep one
            type(item) in _SCALARS for item in (value.values() if type(value) is dict else value)):
        return value.copy(), _digest(value, data, buffers), len(data)
    copies = [bytearray(raw) for raw in buffers]
    try:
        duplicate = pickle.loads(data, buffers=copies)
    except Exception:
        duplicate = copy.deepcopy(value)
    return duplicate, _digest(value, data, buffers), len(data) + sum(len(c) for c in copies)


def _pickled(value: Any) -> tuple[bytes, list[memoryview]]:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    raws = []
    for buffer in buffers:
        try:
            raws.append(buffer.raw())
        except BufferError:  # not contiguous
            raws.append(memoryview(bytes(memoryview(buffer))))
    return data, raws


def _digest(value: Any, data: bytes, buffers: list[memoryview]) -> Hashable:
    crc = zlib.crc32(data)
    for raw in buffers:
        crc = zlib.crc32(raw, crc)
    return type(value).__qualname__, len(data), tuple(raw.nbytes for raw in buffers), crc


def restore_contents(target: Any, saved: Any) -> bool:
    """Give ``target`` the contents of ``saved`` (a copy of it from before) in place; False where that cannot be
    done in place (the caller binds the copy instead)."""
    if type(target) is not type(saved):
        return False
    numpy = sys.modules.get("numpy")
    try:
        if isinstance(target, list):
            target[:] = saved
        elif isinstance(target, (dict, set)):
            target.clear()
            target.update(saved)
        elif isinstance(target, bytearray):
            target[:] = saved
        elif isinstance(target, deque):
            target.clear()
            target.extend(saved)
        elif numpy is not None and isinstance(target, numpy.ndarray):
            if target.shape != saved.shape or target.dtype != saved.dtype or not target.flags.writeable:
                return False
            target[...] = saved
        elif module_of(target) == "pandas" and hasattr(target, "_update_inplace"):
            # pandas' own road for inplace=True operations: the frame or series takes the copy's data
            target._update_inplace(saved)
            target.attrs = saved.attrs
        elif isinstance(getattr(target, "__dict__", None), dict) and not hasattr(type(target), "__slots__"):
            target.__dict__.clear()
            target.__dict__.update(saved.__dict__)
        else:
            return False
    except Exception:
        return False
    return True


# -- the journal of one run ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One name a call changed: ``df (in place)``."""

    name: str
    how: How

    def __str__(self) -> str:
        return f"{self.name} ({self.how})"


def changes_display(changes: list[Change]) -> Display | None:
    """The display naming what one call changed (``variables: df (in place), tmp (new)``), for the call's section
    and title (:attr:`agentkernel.listeners.timeline.Entry.changes`); None when it changed no variable."""
    if not changes:
        return None
    return Display({CHANGES_MIME: {"changes": [{"name": c.name, "how": c.how} for c in changes]},
                    "text/plain": "variables: " + ", ".join(map(str, changes))})


@dataclass
class Saved:
    """An object changed in place during the run, with a copy of its contents from before the run."""

    obj: Any
    copy: Any
    size: int
    names: list[str]
    after: Hashable | None = None
    """Its fingerprint when the run last changed it."""
    dropped: bool = False
    """Its copy was dropped to make room for a later run's copies."""


@dataclass
class State:
    """What a name held when the run last changed it: the object's identity and fingerprint (None: not taken)."""

    ident: int
    fingerprint: Hashable | None


@dataclass
class Call:
    """One piece of code about to run: the bindings it can change and the copies of what it can change in place."""

    reach: Reach
    bindings: dict[str, Any]
    copies: dict[int, tuple[Any, Any, int, Hashable | None]] = field(default_factory=dict)
    """id(obj) -> (obj, its copy, the copy's size, its fingerprint before the code)"""


@dataclass
class Outcome:
    """What an undo did: names restored (``df (contents)``), names left (changed since the run), what could not be
    restored and why."""

    run_id: str
    restored: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    dynamic: bool = False

    def line(self) -> str:
        """The outcome in one line (empty when the run changed no variable)."""
        parts = []
        if self.restored:
            parts.append(f"restored {len(self.restored)} variable{'s' * (len(self.restored) != 1)}: "
                         f"{', '.join(self.restored)}")
        if self.left:
            parts.append(f"left as they are, changed since the run: {', '.join(self.left)}")
        if self.lost:
            parts.append(f"not restored: {', '.join(self.lost)}")
        return "; ".join(parts)


@dataclass(eq=False)
class Journal:
    """What one run's code did to the namespace (see the module docstring); made by :meth:`Journals.run`."""

    run_id: str
    owner: Journals
    bindings: dict[str, Any] = field(default_factory=dict)
    """name -> the object it held before the run (MISSING: it did not exist)."""
    after: dict[str, State | Any] = field(default_factory=dict)
    """name -> what the run left in it (MISSING: deleted)."""
    saved: dict[int, Saved] = field(default_factory=dict)
    """id(obj) -> the objects the run changed in place, with their contents from before the run."""
    lost: dict[str, str] = field(default_factory=dict)
    """name -> why a change to what it holds cannot be taken back (over the budget, uncopyable)."""
    meddled: set[str] = field(default_factory=set)
    """Names changed by someone else between two of the run's calls (a served session's user)."""
    calls: int = 0
    """run_python calls journaled."""
    dynamic: set[str] = field(default_factory=set)
    """How its code reached names without naming them (``globals()``...)."""
    born: float = field(default_factory=time.monotonic)
    epoch: object = None
    """The ``epoch`` of the last call (see :meth:`before`)."""
    kept: int = 0
    """Bytes of copies this run keeps (the sizes of its :attr:`saved` copies not dropped), kept up to date where
    :attr:`saved` changes, since the budget is checked before every copy of every call."""

    @property
    def names(self) -> int:
        """How many variables the run changed that an undo can take back or name."""
        return len(self.bindings.keys() | self.after.keys() | self.lost.keys()
                   | {name for saved in self.saved.values() for name in saved.names})

    @property
    def empty(self) -> bool:
        """Nothing left to undo or to name."""
        return not self.bindings and not self.saved and not self.lost and not self.dynamic

    def before(self, namespace: dict[str, Any], code: str | Iterable[types.CodeType], epoch: object = None) -> Call:
        """Before ``code`` (see :func:`reach`) runs in ``namespace``: what it can reach, copied within the budget.

        ``epoch`` (the shell's execution count) tells whether anyone else can have run code since the run's last
        call; only then are the names that call left looked at again (someone else's change is left by the undo)."""
        found = reach(code)
        try:
            found = widen(namespace, found)
        except Exception:  # a hostile object in the namespace: what the code names still counts
            pass
        others = epoch is None or epoch != self.epoch
        self.epoch = epoch
        if found.dynamic:
            self.dynamic.add(found.dynamic)
            bindings = dict(namespace)
            bindings.update((name, namespace.get(name, MISSING)) for name in found.names)
        else:
            bindings = {name: namespace.get(name, MISSING) for name in found.names}
        call = Call(found, bindings)
        used = 0
        for name in found.names:
            value = bindings[name]
            if value is MISSING:
                continue
            try:
                if others and name in self.after and name not in self.meddled and self._changed_since(name, value):
                    self.meddled.add(name)
                used += self._copy(name, value, call, used)
            except Exception as e:  # an object that breaks the rules (its attributes raise): named, never fatal
                self.lost.setdefault(name, f"{name} (a {type(value).__name__} that cannot be read: "
                                           f"{type(e).__name__})")
        return call

    def _copy(self, name: str, value: Any, call: Call, used: int) -> int:
        """Copy ``value`` (held by ``name``) into ``call`` if it can change in place and fits beside ``used``; the
        bytes the copy takes (0: not copied, and said why where that matters)."""
        if id(value) in call.copies or id(value) in self.saved:
            return 0
        if type(value) not in _FLAT:  # a list, dict, set or bytearray is none of these: the common case, at once
            if is_immutable(value) or is_code(value):
                return 0
            if why := uncopyable(value):
                self.lost.setdefault(name, f"{name} ({why}: not copied)")
                return 0
        size = estimate_size(value)
        if not self._fits(size, used):
            self.lost.setdefault(name, self._over(name, size))
            return 0
        try:
            duplicate, print_before, size = snapshot(value, size)
        except Exception as e:
            self.lost.setdefault(name, f"{name} (a {type(value).__name__} that cannot be copied: {type(e).__name__})")
            return 0
        if not self._fits(size, used):  # larger than it looked (objects in a frame's columns)
            self.lost.setdefault(name, self._over(name, size))
            return 0
        call.copies[id(value)] = (value, duplicate, size, print_before)
        return size

    def not_followed(self, error: BaseException) -> None:
        """A call the journal could not follow (``error``): the undo names it."""
        self.lost[f" call {self.calls + 1}"] = (f"what run_python call {self.calls + 1} did (the undo journal failed: "
                                                f"{type(error).__name__})")
        self.calls += 1

    def _keep(self, size: int) -> None:
        """Count ``size`` more bytes of copies kept (less, if negative), here and in the kernel's total if this
        journal is still one of its runs' (a call that ran on while its run was forgotten counts for nothing)."""
        self.kept += size
        if self.owner.runs.get(self.run_id) is self:
            self.owner.kept += size

    def _fits(self, size: int, used: int) -> bool:
        """Whether a copy of ``size`` bytes fits in the budget beside ``used`` (dropping older runs' copies)."""
        return size <= self.owner.room() - used or size <= self.owner.make_room(self, size + used) - used

    def _over(self, name: str, size: int) -> str:
        return f"{name} ({size_text(size)}, over the {size_text(self.owner.budget)} budget: not copied)"

    def after_call(self, namespace: dict[str, Any], call: Call) -> list[Change]:
        """After the code ran: the names it changed (kept in the journal), in the order the code names them."""
        self.calls += 1
        changes: dict[str, How] = {}
        prints: dict[int, Hashable | None] = {}
        for name, before in call.bindings.items():
            now = namespace.get(name, MISSING)
            if now is before:
                continue
            changes[name] = "new" if before is MISSING else "deleted" if now is MISSING else "rebound"
            self.bindings.setdefault(name, before)
        if call.reach.dynamic:  # names it made without naming them
            for name in namespace.keys() - call.bindings.keys():
                changes[name] = "new"
                self.bindings.setdefault(name, MISSING)
        for ident, (obj, duplicate, size, print_before) in call.copies.items():
            prints[ident] = print_after = fingerprint(obj)
            if print_before is not None and print_after == print_before:
                continue
            names = [name for name in call.reach.names if call.bindings.get(name, MISSING) is obj]
            self.saved[ident] = Saved(obj, duplicate, size, names, print_after)
            self._keep(size)
            changes.update((name, "in place") for name in names if namespace.get(name, MISSING) is obj)
        reached = {id(call.bindings[name]) for name in call.reach.names} if self.saved else set()
        for ident in reached - call.copies.keys():  # changed in place in an earlier call: again in this one?
            if (saved := self.saved.get(ident)) is not None:
                prints[ident] = now_print = fingerprint(saved.obj)
                if now_print != saved.after:
                    saved.after = now_print
                    changes.update((name, "in place") for name in saved.names
                                   if namespace.get(name, MISSING) is saved.obj and name not in changes)
        for name in changes:
            now = namespace.get(name, MISSING)
            if now is MISSING:
                self.after[name] = MISSING
            else:
                known = prints.get(id(now), MISSING)
                self.after[name] = State(id(now), self._print(now) if known is MISSING else known)
        if len(changes) < 2:
            return [Change(name, how) for name, how in changes.items()]
        order = {name: i for i, name in enumerate(call.reach.order)}
        return [Change(name, how) for name, how in sorted(changes.items(), key=lambda c: order.get(c[0], len(order)))]

    def _print(self, value: Any) -> Hashable | None:
        """The fingerprint of what the run left in a name, if it is data within the budget."""
        try:
            if is_code(value) or uncopyable(value):
                return None
            return fingerprint(value) if estimate_size(value) <= self.owner.budget else None
        except Exception:  # cannot be read: only its identity is compared
            return None

    def _changed_since(self, name: str, now: Any) -> bool:
        """Whether ``name`` no longer holds what the run left in it."""
        left = self.after.get(name, MISSING)
        if left is MISSING:
            return now is not MISSING
        if now is MISSING:
            return True
        if id(now) != left.ident:  # another object: changed, unless it holds the same (``model = "fitted"`` again)
            return left.fingerprint is None or fingerprint(now) != left.fingerprint
        return left.fingerprint is not None and fingerprint(now) != left.fingerprint

    def undo(self, namespace: dict[str, Any]) -> Outcome:
        """Take back what the run did to ``namespace``; what was restored, left and lost. What is taken back is
        forgotten; what was left stays, so that undoing again once it is back as the run left it takes it back."""
        outcome = Outcome(self.run_id, dynamic=bool(self.dynamic))
        left = {name for name in self.bindings.keys() | self.after.keys()
                if name in self.meddled or self._changed_since(name, namespace.get(name, MISSING))}
        order = {name: i for i, name in enumerate(namespace)}
        done: dict[str, list[str]] = {}
        saved_copies: dict[str, Any] = {}
        for ident, saved in list(self.saved.items()):
            if saved.dropped:
                outcome.lost += [f"{name} (its copy was dropped to make room for a later run's)"
                                 for name in saved.names]
            elif left.intersection(saved.names) or saved.after is not None and fingerprint(saved.obj) != saved.after:
                left.update(saved.names)
                continue
            elif restore_contents(saved.obj, saved.copy):
                for name in saved.names:
                    done.setdefault(name, []).append("contents")
            else:
                for name in saved.names:
                    if name not in left and self.bindings.get(name, saved.obj) is saved.obj:
                        self.bindings[name] = saved_copies[name] = saved.copy
                        done.setdefault(name, []).append("a copy: not restorable in place")
            del self.saved[ident]
            self._keep(0 if saved.dropped else -saved.size)
        for name, before in list(self.bindings.items()):
            if name in left:
                continue
            now = namespace.get(name, MISSING)
            if before is MISSING:
                if now is not MISSING:
                    del namespace[name]
                    done.setdefault(name, []).append("removed")
            else:
                namespace[name] = before
                if now is not before and before is not saved_copies.get(name):
                    done.setdefault(name, []).append("brought back" if now is MISSING else "rebound")
            del self.bindings[name]
        for name in list(self.after):
            if name not in left:
                del self.after[name]
        outcome.restored = [f"{name} ({', '.join(hows)})" for name, hows in sorted(
            done.items(), key=lambda item: order.get(item[0], len(order))) if name not in left]
        outcome.left = sorted(left)
        outcome.lost += [self.lost[name] for name in sorted(self.lost)]
        if self.dynamic:
            outcome.lost.append(f"in-place changes through {', '.join(sorted(self.dynamic))} to what the code did not "
                                "name (not copied)")
        self.lost.clear()
        self.dynamic.clear()
        self.meddled &= left
        return outcome


def size_text(size: int) -> str:
    """``size`` bytes as a line says it: ``12 MB``, ``3 KB``."""
    return f"{size / 2**20:,.0f} MB" if size >= 2**20 else f"{size / 1024:,.0f} KB"


@dataclass(eq=False)
class Journals:
    """The journals of one kernel's runs, by run id (oldest first), sharing one copy budget."""

    budget: int = DEFAULT_BUDGET
    runs: OrderedDict[str, Journal] = field(default_factory=OrderedDict)
    kept: int = 0
    """Bytes of copies all its runs keep (the sum of their :attr:`Journal.kept`)."""

    def run(self, run_id: str) -> Journal:
        """The journal of ``run_id``, made on first use (the newest last)."""
        journal = self.runs.get(run_id)
        if journal is None:
            journal = self.runs[run_id] = Journal(run_id, self)
            while len(self.runs) > MAX_RUNS:
                self.kept -= self.runs.popitem(last=False)[1].kept
        return journal

    def forget(self, run_id: str = "") -> list[Journal]:
        """Forget the journal of ``run_id`` (by default every run's): what it kept alive (the old objects of the names
        it rebound or deleted, the copies of what it changed in place) is let go, and it can no longer be undone.
        The journals forgotten."""
        forgotten = list(self.runs.values()) if not run_id else [self.runs[run_id]] if run_id in self.runs else []
        for journal in forgotten:
            del self.runs[journal.run_id]
            self.kept -= journal.kept
        return forgotten

    def room(self) -> int:
        """Bytes of copies that can still be kept without dropping any."""
        return self.budget - self.kept

    def make_room(self, journal: Journal, size: int) -> int:
        """Drop the oldest other runs' copies until ``size`` bytes fit (or none are left); the room there is. A copy
        is only dropped if dropping all of them would make enough room (else none is)."""
        others = [(j, s) for j in self.runs.values() if j is not journal for s in j.saved.values() if not s.dropped]
        if self.room() + sum(s.size for _, s in others) < size:
            return self.room()
        for owner, saved in others:
            if self.room() >= size:
                break
            saved.dropped, saved.copy = True, None
            owner._keep(-saved.size)
        return self.room()
