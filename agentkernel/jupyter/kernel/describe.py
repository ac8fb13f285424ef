"""Short text descriptions of notebook values for the kernel tools: a one-line form, a size hint, a summary.

pandas and numpy are not dependencies: their objects are recognised only when the notebook has imported them
(``sys.modules``), so describing a value never imports anything. Every description is bounded, and a value whose
``repr`` (or any other probe) fails is still described, with what failed. Strings, reprs and table cells are
redacted (:mod:`agentkernel.secrets`) before they are cut, so no cut leaves a piece of a secret that no longer
looks like it.
"""

from __future__ import annotations

import builtins
import inspect
import re
import reprlib
import sys
import warnings
from collections.abc import Callable
from typing import Any

from ...secrets import redact_text
from ...text import short

LINE_WIDTH = 80
"""Width of a value's one-line form in ``list_variables``."""
FIRST_ITEMS = 10
"""Items of a container shown by ``inspect_variable``."""
HEAD_ROWS = 5
MAX_COLUMNS = 50
"""Columns listed one per line (dtypes, missing counts) before the rest are counted."""
REPR_CHARS = 2000

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class _RedactingRepr(reprlib.Repr):
    """reprlib's bounded repr, with strings and other objects' reprs redacted before reprlib cuts them."""

    def repr_str(self, x: str, level: int) -> str:
        return super().repr_str(redact_text(x), level)

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            text = redact_text(builtins.repr(x))
        except Exception:
            return super().repr_instance(x, level)
        if len(text) > self.maxother:
            head = max(0, (self.maxother - 3) // 2)
            tail = max(0, self.maxother - 3 - head)
            text = text[:head] + self.fillvalue + text[len(text) - tail:]
        return text


_repr = _RedactingRepr()
_repr.maxlevel, _repr.maxlist, _repr.maxtuple, _repr.maxset, _repr.maxdict = 2, 8, 8, 8, 6
_repr.maxstring, _repr.maxother, _repr.maxlong = 200, 200, 60


def safe_repr(value: Any, limit: int = REPR_CHARS) -> str:
    """``repr(value)`` bounded in depth and length, without memory addresses (``<Foo object>``, not ``<Foo object
    at 0x7f...>``: they mean nothing to a model and differ on every run); a failing ``repr`` is reported."""
    try:
        text = _ADDRESS.sub("", _repr.repr(value))
    except Exception as e:
        return f"<{type(value).__name__}: repr failed with {type(e).__name__}: {short(str(e), 100)}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def kind(value: Any) -> str | None:
    """``"DataFrame"``, ``"Series"`` or ``"ndarray"`` when ``value`` is one (of an imported pandas/numpy)."""
    pandas = sys.modules.get("pandas")
    if pandas is not None:
        if isinstance(value, pandas.DataFrame):
            return "DataFrame"
        if isinstance(value, pandas.Series):
            return "Series"
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return "ndarray"
    return None


def type_name(value: Any) -> str:
    return type(value).__name__


def size_hint(value: Any) -> str:
    """``(100, 4)`` for anything with a shape, ``len 12`` for other sized values, else ``""``."""
    if isinstance(value, type):
        return ""
    try:
        shape = getattr(value, "shape", None)
        if isinstance(shape, tuple) and shape:  # not () of a numpy scalar
            return str(shape)
        if hasattr(value, "__len__"):
            return f"len {len(value):,}"
    except Exception:
        pass
    return ""


def one_line(value: Any, width: int = LINE_WIDTH) -> str:
    """A value on one line: a DataFrame by its columns, an array by its dtype and values, anything else by repr."""
    try:
        what = kind(value)
        if what == "DataFrame":
            return short(redact_text("columns: " + ", ".join(map(str, value.columns))), width)
        if what == "ndarray":
            return short(f"{value.dtype}: " + " ".join(redact_text(repr(value)).split()), width)
        if what == "Series":
            return short(redact_text(f"{value.dtype}, name {value.name!r}"), width)
        if callable(value) and _is_function_like(value):
            return short(f"{_name(value)}{_signature(value)}", width)
    except Exception:
        pass
    return short(safe_repr(value, width * 4), width)


def describe(value: Any) -> str:
    """A summary by kind: DataFrame/Series, numpy array, container, callable, anything else."""
    describer = _DESCRIBERS.get(kind(value) or "")
    if describer is None:
        if isinstance(value, dict | list | tuple | set | frozenset):
            describer = _container
        elif callable(value) and _is_function_like(value):
            describer = _callable
        else:
            describer = _other
    try:
        return describer(value)
    except Exception as e:  # a half-broken object still gets its type and repr
        return f"{_other(value)}\n(could not summarize it: {type(e).__name__}: {short(str(e), 200)})"


# -- by kind ---------------------------------------------------------------------------------------------------


def _data_frame(df: Any) -> str:
    rows, cols = df.shape
    lines = [f"DataFrame: {rows:,} rows × {cols:,} columns", "", "columns (dtype, missing values):"]
    missing = df.isna().sum()
    for i, (name, dtype) in enumerate(df.dtypes.items()):
        if i == MAX_COLUMNS:
            lines.append(f"  … and {cols - MAX_COLUMNS:,} more columns")
            break
        lines.append(f"  {name}: {dtype}, {int(missing[name]):,} missing")
    total_missing = int(missing.sum())
    lines.append(f"missing values in all: {total_missing:,}" if total_missing else "no missing values")
    lines += ["", f"first {min(HEAD_ROWS, rows)} rows:", _table(df.head(HEAD_ROWS))]
    numeric = df.select_dtypes("number")
    if numeric.shape[1]:
        lines += ["", "numeric columns (describe):", _table(numeric.describe())]
    return "\n".join(lines)


def _series(series: Any) -> str:
    lines = [f"Series {series.name!r}: {len(series):,} values, dtype {series.dtype}, "
             f"{int(series.isna().sum()):,} missing", "", f"first {min(HEAD_ROWS, len(series))} values:",
             str(_redacted(series.head(HEAD_ROWS)).to_string())]
    numpy = sys.modules.get("numpy")
    if numpy is not None and numpy.issubdtype(series.dtype, numpy.number):
        lines += ["", "describe:", str(series.describe().to_string())]
    return "\n".join(lines)


def _table(frame: Any) -> str:
    return str(_redacted(frame).to_string(max_cols=20, max_colwidth=40, line_width=120))


def _redacted(data: Any) -> Any:
    """A DataFrame or Series with its string cells and labels redacted, before pandas cuts them to a column's
    width."""

    def redact(value: Any) -> Any:
        return redact_text(value) if isinstance(value, str) else value

    data = data.map(redact)
    return data.rename(index=redact, columns=redact) if kind(data) == "DataFrame" else data.rename(index=redact)


def _array(array: Any) -> str:
    import numpy  # present: the value is one of its arrays

    lines = [f"ndarray: shape {array.shape}, dtype {array.dtype}, {array.size:,} elements"]
    if array.size and numpy.issubdtype(array.dtype, numpy.number) and not numpy.iscomplexobj(array):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN arrays: the figures are nan, no warning
            figures = (numpy.nanmin(array), numpy.nanmax(array), numpy.nanmean(array))
        lines.append("min {} · max {} · mean {}".format(*(f"{float(f):.6g}" for f in figures)))
        if numpy.issubdtype(array.dtype, numpy.floating):
            nans = int(numpy.isnan(array).sum())
            if nans:
                lines.append(f"{nans:,} NaN values (left out of min/max/mean)")
    with numpy.printoptions(threshold=200, edgeitems=3, linewidth=100):
        lines += ["", repr(array)]
    return "\n".join(lines)


def _container(value: Any) -> str:
    count = len(value)
    head = f"{type_name(value)} of {count:,} item{'s' * (count != 1)}"
    if not count:
        return head
    lines = [head + (f"; the first {FIRST_ITEMS}:" if count > FIRST_ITEMS else ":")]
    if isinstance(value, dict):
        for i, (key, item) in enumerate(value.items()):
            if i == FIRST_ITEMS:
                break
            lines.append(f"  {safe_repr(key, 60)}: {short(safe_repr(item), 200)}")
    else:
        for i, item in enumerate(value):
            if i == FIRST_ITEMS:
                break
            lines.append(f"  {short(safe_repr(item), 200)}")
    return "\n".join(lines)


def _callable(value: Any) -> str:
    kind_name = "class" if isinstance(value, type) else type_name(value)
    lines = [f"{kind_name} {_name(value)}{_signature(value)}"]
    doc = inspect.getdoc(value)
    if doc:
        lines += ["", doc.strip().split("\n\n")[0]]
    return "\n".join(lines)


def _other(value: Any) -> str:
    size = size_hint(value)
    return f"{type(value).__module__}.{type(value).__qualname__}{' · ' + size if size else ''}\n{safe_repr(value)}"


_DESCRIBERS: dict[str, Callable[[Any], str]] = {"DataFrame": _data_frame, "Series": _series, "ndarray": _array}


def _is_function_like(value: Any) -> bool:
    """Functions, methods, classes and builtins: not every object that happens to define ``__call__``."""
    return inspect.isroutine(value) or isinstance(value, type) or hasattr(value, "__wrapped__")


def _name(value: Any) -> str:
    return str(getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type_name(value))


def _signature(value: Any) -> str:
    try:
        return str(inspect.signature(value))
    except (TypeError, ValueError):
        return "(...)"
