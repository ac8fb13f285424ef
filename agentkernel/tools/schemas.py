"""A tool's arguments as a pydantic model: its JSON schema for the model, and validation of a call's arguments.

The model is built from the function's signature and type hints, with parameter descriptions from the docstring's
``Args:`` section. Arguments are validated as JSON in pydantic's strict mode, so JSON's own types are respected
(``"3"`` is not an integer, ``null`` is not a string) while JSON arrays still fill tuples and sets and strings
fill ``Path`` or ``datetime`` parameters. Validation errors are turned into one plain sentence for the model.

pydantic is imported when the first tool is made, not with this module (``%load_ext`` stays cheap).
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
import warnings
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel, ConfigDict
    from pydantic_core import ErrorDetails, ValidationError

_CONFIG: ConfigDict = {"extra": "forbid", "arbitrary_types_allowed": True}

# The JSON type a value must have, by pydantic error type, for messages such as "must be of type integer".
_EXPECTED = {
    "string_type": "string", "int_type": "integer", "int_parsing": "integer", "int_from_float": "integer",
    "float_type": "number", "float_parsing": "number", "bool_type": "boolean", "bool_parsing": "boolean",
    "list_type": "array", "tuple_type": "array", "set_type": "array", "frozen_set_type": "array",
    "dict_type": "object", "model_type": "object", "model_attributes_type": "object", "dataclass_type": "object",
}


@functools.cache
def _validation_error() -> type[ValidationError]:
    from pydantic import ValidationError

    return ValidationError


@functools.cache
def _no_titles() -> type:
    """Pydantic's schema generator without a title on every field (they only repeat the names and cost the model
    tokens)."""
    from pydantic.json_schema import GenerateJsonSchema

    class NoTitles(GenerateJsonSchema):
        def field_title_should_be_set(self, schema: Any) -> bool:
            return False

    return NoTitles


@dataclass(frozen=True)
class Arguments:
    """The arguments a function takes, as a pydantic model whose field aliases are the parameter names."""

    model: type[BaseModel]
    names: dict[str, str]  # field name in the model -> parameter name

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments object (``properties``, ``required``, no extra keys)."""
        from pydantic.json_schema import PydanticJsonSchemaWarning

        with warnings.catch_warnings():  # a default JSON cannot hold (an object) is left out of the schema
            warnings.simplefilter("ignore", PydanticJsonSchemaWarning)
            schema = self.model.model_json_schema(by_alias=True, schema_generator=_no_titles())
        schema.pop("title", None)
        schema.setdefault("properties", {})
        schema.setdefault("required", [])
        return schema

    def validate(self, arguments: str) -> dict[str, Any]:
        """The keyword arguments for a call from its JSON object text; raise ValueError saying what is wrong.

        Only the arguments the call gave are returned, so the function's own defaults apply to the rest.
        """
        try:
            values = self.model.__pydantic_validator__.validate_json(arguments or "{}", strict=True)
        except _validation_error() as e:  # (the class is looked up only when one is raised)
            raise ValueError(describe_errors(e.errors(include_url=False), list(self.names.values()))) from None
        return {self.names[field]: values.__dict__[field] for field in values.__pydantic_fields_set__}


def arguments_of(fn: Callable[..., Any], descriptions: dict[str, str], skip: Collection[str] = ()) -> Arguments:
    """The arguments model of ``fn``; ``*args``, ``**kwargs`` and the parameters in ``skip`` are not offered to the
    model."""
    from pydantic import Field, create_model

    hints = _type_hints(fn)
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}
    for i, (pname, param) in enumerate(inspect.signature(fn).parameters.items()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or pname in skip:
            continue
        # Fields get neutral names (parameters may be called `schema`, `copy` or `_x`); the alias is the name.
        field = f"p{i}"
        names[field] = pname
        default = ... if param.default is param.empty else param.default
        fields[field] = (hints.get(pname, Any), Field(default, alias=pname, description=descriptions.get(pname)))
    name = re.sub(r"\W", "_", getattr(fn, "__name__", "tool"))
    try:
        arguments = Arguments(create_model(name, __config__=_CONFIG, **fields), names)
        arguments.json_schema()
    except Exception:  # a type pydantic cannot describe in JSON: that parameter takes any JSON value
        for field, (hint, info) in fields.items():
            if not _describable(hint):
                fields[field] = (Any, info)
        arguments = Arguments(create_model(name, __config__=_CONFIG, **fields), names)
    return arguments


def parameter_of_type(fn: Callable[..., Any], cls: type) -> str | None:
    """The name of ``fn``'s parameter annotated ``cls`` (the first one), if it has one."""
    hints = _type_hints(fn)
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    return next((name for name in parameters if hints.get(name) is cls), None)


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """A docstring's description (every paragraph before an ``Args:``-style section) and its argument descriptions."""
    head = re.split(r"^(?:Args|Arguments|Parameters|Returns|Raises|Example|Examples):\s*$", doc, maxsplit=1,
                    flags=re.MULTILINE)[0]
    description = "\n\n".join(" ".join(p.split()) for p in head.split("\n\n") if p.strip())
    arg_docs: dict[str, str] = {}
    match = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.MULTILINE)
    if match:
        current, indent = None, None
        for line in match.group(1).splitlines():
            entry = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
            line_indent = len(line) - len(line.lstrip())
            if entry and line_indent == (indent or line_indent):  # a new entry starts at the first entry's indent
                current, indent = entry.group(1), line_indent
                arg_docs[current] = entry.group(2).strip()
            elif current and line.strip():  # a continuation line, even one that looks like "word: text"
                arg_docs[current] += " " + line.strip()
    return description, arg_docs


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # e.g. a string annotation naming a class defined inside a function: one by one
        pass
    target = getattr(inspect.unwrap(fn), "__func__", fn)
    hints = {}
    for name, annotation in getattr(target, "__annotations__", {}).items():
        try:
            hints[name] = eval(annotation, getattr(target, "__globals__", {})) if isinstance(annotation, str) \
                else annotation
        except Exception:  # a name that cannot be resolved: that parameter takes any JSON value
            pass
    return hints


def _describable(hint: Any) -> bool:
    from pydantic import create_model

    try:
        create_model("probe", __config__=_CONFIG, value=(hint, ...)).model_json_schema()
    except Exception:
        return False
    return True


def describe_errors(errors: list[ErrorDetails], expected: list[str]) -> str:
    """Pydantic's validation errors in plain words: missing and unknown arguments first, then each bad value."""
    missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing" and len(e["loc"]) == 1]
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
    parts = []
    if unknown:
        parts.append(f"unknown argument(s) {', '.join(unknown)}; expected {', '.join(expected) or 'none'}")
    if missing:
        parts.append(f"missing required argument(s) {', '.join(missing)}")
    parts += [_describe(e) for e in errors if not (len(e["loc"]) == 1 and e["type"] in ("missing", "extra_forbidden"))]
    return "; ".join(parts)


def _describe(error: ErrorDetails) -> str:
    name, *rest = error["loc"] or ("arguments",)
    where = f"argument {str(name) + ''.join(f'[{p}]' if isinstance(p, int) else f'.{p}' for p in rest)!r}"
    kind, value = error["type"], error.get("input")
    if kind == "json_invalid":
        return f"arguments are not valid JSON ({error.get('ctx', {}).get('error', error['msg'])})"
    if kind == "model_type" and not error["loc"]:
        return "arguments must be a JSON object"
    if kind in _EXPECTED:
        return f"{where} must be of type {_EXPECTED[kind]}, got {_json_type(value)}"
    if kind == "literal_error":
        return f"{where} must be one of {error.get('ctx', {}).get('expected')}, got {_short_repr(value)}"
    if kind == "missing":
        return f"{where} is missing"
    if kind == "extra_forbidden":
        return f"{where} is not expected"
    message = error["msg"]
    message = "must be" + message[len("Input should be"):] if message.startswith("Input should be") else message
    return f"{where}: {message}" if not message.startswith("must be") else f"{where} {message}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for kind, name in ((str, "string"), (int, "integer"), (float, "number"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"
