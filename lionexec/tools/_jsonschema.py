"""A small, exact JSON Schema validator for tool arguments (no dependency beyond the stdlib).

An explicit schema on a :class:`~lionexec.tools.Tool` (``schema=...``, and every tool imported
from an MCP server) is checked against the arguments before the call, so bad values end the
call ``invalid`` instead of reaching the tool. :func:`compile_schema` turns a schema into a
:class:`SchemaValidator` once, when the tool is defined; validating is then a walk of
precompiled checks.

Why not the ``jsonschema`` package: ``import lionexec`` depends on trio, attrs and cattrs only,
and ``jsonschema`` brings ``referencing``, ``rpds-py`` (a compiled extension) and a schema
registry with it. Tool schemas use a small part of JSON Schema, so lionexec implements that part
exactly, and its tests check it against ``jsonschema`` (draft 2020-12) on generated schemas and
values. Supported keywords (draft 2020-12 semantics; draft-07's array ``items`` and
``additionalItems`` and draft-04's boolean ``exclusiveMinimum``/``exclusiveMaximum`` are read
too):

* any value: ``type`` (a name or a list), ``enum``, ``const``, ``allOf``, ``anyOf``, ``oneOf``,
  ``not``, ``if``/``then``/``else``, ``$ref`` to the same document (``#``, ``#/$defs/...``,
  ``#/definitions/...``, any JSON pointer; beside other keywords as in draft 2020-12, alone
  when the document's ``$schema`` is draft-07 or older), boolean schemas;
* objects: ``properties``, ``required``, ``additionalProperties``, ``patternProperties``,
  ``propertyNames``, ``minProperties``, ``maxProperties``, ``dependentRequired``,
  ``dependentSchemas``;
* arrays: ``items``, ``prefixItems``, ``minItems``, ``maxItems``, ``uniqueItems``,
  ``contains``, ``minContains``, ``maxContains``;
* numbers: ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
  ``multipleOf``; strings: ``minLength``, ``maxLength`` (in code points), ``pattern`` (a
  search, as ``jsonschema`` does, but never one that could take more than linear time in the
  model's string: on RE2 when the ``re2`` extra is installed, else on Python's :mod:`re` only
  for a pattern a static check proves linear there; any other pattern, ``patternProperties``
  ones included, raises :class:`SchemaError` when the schema is compiled).

Other keywords are annotations here and accept everything: ``format`` (an annotation in draft
2020-12 unless a validator opts in), ``title``, ``description``, ``default``, ``examples``,
and the few assertions this module does not implement (``unevaluatedProperties``,
``unevaluatedItems``, ``$dynamicRef``): a schema using them is checked less strictly than the
tool behind it would check, never more.

Where the arguments are not plain JSON, Python values are read as JSON would encode them: a
tuple or set is an array, an enum member its value, a path, UUID or date its string, an attrs
or dataclass instance an object of its fields (so arguments that were already validated and
structured validate again). Numbers must be finite: ``NaN`` and infinities are refused, since
JSON has neither.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import math
import pathlib
import re
import uuid
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final, TypeAlias

import attrs

from lionexec.errors import SchemaError, ValidationError

from ._patterns import compile_pattern

__all__ = ["MAX_DEPTH", "SchemaValidator", "compile_schema"]

#: How deeply nested a value may be (objects and arrays) before it is refused unchecked.
MAX_DEPTH: Final = 100

_Path: TypeAlias = tuple[str | int, ...]
_Check: TypeAlias = Callable[[Any, _Path, int], None]

_TYPE_NAMES: Final = frozenset(
    {"null", "boolean", "integer", "number", "string", "array", "object"}
)
_PLAIN: Final = frozenset({str, int, float, bool, type(None), list, dict})
_OLD_DRAFTS: Final = re.compile(r"draft-0[3-7]/")


class _Invalid(Exception):
    """One failed check: where, and what is wrong."""

    def __init__(self, path: _Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def _path_text(path: _Path) -> str | None:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text or None


@attrs.frozen(eq=False)
class SchemaValidator:
    """A compiled JSON Schema. Build it with :func:`compile_schema`."""

    schema: Mapping[str, Any] | bool
    _check: _Check = attrs.field(repr=False)

    def validate(self, instance: Any, *, label: str = "arguments") -> None:
        """Check *instance*; raise :class:`ValidationError` naming the first bad value's path.

        The error's ``field`` is the path (``filters.limit``, ``points[2].x``), or ``None``
        when the whole instance is wrong. Never blocks; the work is proportional to the size
        of *instance* (and of the schema's combinators).
        """
        try:
            self._check(instance, (), 0)
        except _Invalid as exc:
            where = _path_text(exc.path)
            raise ValidationError(
                f"invalid {label}: {where + ': ' if where else ''}{exc.message}", field=where
            ) from None
        except RecursionError:
            raise ValidationError(f"invalid {label}: nested too deeply") from None

    def is_valid(self, instance: Any) -> bool:
        """Whether *instance* passes."""
        try:
            self._check(instance, (), 0)
        except (_Invalid, RecursionError):
            return False
        return True


def compile_schema(schema: Mapping[str, Any] | bool) -> SchemaValidator:
    """Compile *schema* (a JSON Schema document) into a :class:`SchemaValidator`.

    Raises:
        SchemaError: the schema is malformed (a keyword of the wrong type, an unknown type
            name, a regular expression that does not compile, a ``$ref`` outside the
            document), naming the keyword's location.
    """
    if not isinstance(schema, Mapping | bool):
        raise SchemaError(f"a JSON Schema is an object or a boolean, got {type(schema).__name__}")
    compiler = _Compiler(schema)
    return SchemaValidator(schema, compiler.compile(schema, "#"))


# -- values as JSON -------------------------------------------------------------------------


def _as_json(value: Any) -> Any:
    """*value* as JSON would carry it (only called for values that are not plain JSON)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, pathlib.PurePath | uuid.UUID):
        return str(value)
    if isinstance(value, _dt.date | _dt.time):
        return value.isoformat()
    cls = type(value)
    if attrs.has(cls):
        return {a.alias or a.name: getattr(value, a.name) for a in attrs.fields(cls) if a.init}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return True
        return isinstance(value, float) and math.isfinite(value) and value.is_integer()
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "boolean":
        return isinstance(value, bool)
    return value is None  # "null"


def _canonical(value: Any) -> Any:
    """A hashable key such that two JSON values are equal exactly when their keys are."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("num", value)  # 1 == 1.0 and hash(1) == hash(1.0)
    if isinstance(value, str):
        return ("str", value)
    if value is None:
        return ("null",)
    if isinstance(value, list | tuple):
        return ("arr", tuple(_canonical(v) for v in value))
    if isinstance(value, Mapping):
        return ("obj", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("other", id(value))


def _equal(a: Any, b: Any) -> bool:
    return a is b or _canonical(a) == _canonical(b)


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for str()
        return "a very large number"
    return text if len(text) <= 60 else text[:57] + "..."


# -- compilation ----------------------------------------------------------------------------


class _Compiler:
    def __init__(self, root: Mapping[str, Any] | bool) -> None:
        self.root = root
        self.refs: dict[str, _Check] = {}
        dialect = root.get("$schema") if isinstance(root, Mapping) else None
        #: Before draft 2019-09, ``$ref`` replaced the keywords beside it.
        self.ref_alone = isinstance(dialect, str) and bool(_OLD_DRAFTS.search(dialect))

    def compile(self, schema: Any, where: str) -> _Check:
        if schema is True:
            return _accept
        if schema is False:
            return _refuse
        if not isinstance(schema, Mapping):
            raise SchemaError(f"{where}: a schema is an object or a boolean, got {schema!r}")
        if self.ref_alone and "$ref" in schema:
            return _b_ref(self, schema, f"{where}/$ref")
        checks: list[_Check] = []
        for keyword, build in _SINGLE:
            if keyword in schema:
                checks.append(build(self, schema, f"{where}/{keyword}"))
        for keywords, build in _GROUPS:
            if any(k in schema for k in keywords):
                checks.append(build(self, schema, where))
        if not checks:
            return _accept
        if len(checks) == 1:
            return checks[0]
        chain = tuple(checks)

        def all_checks(value: Any, path: _Path, depth: int) -> None:
            for check in chain:
                check(value, path, depth)

        return all_checks

    def ref(self, pointer: str, where: str) -> _Check:
        if not isinstance(pointer, str) or not pointer.startswith("#"):
            raise SchemaError(
                f"{where}: only references inside the schema are supported, got {pointer!r}"
            )
        if pointer in self.refs:
            return self.refs[pointer]
        target = self._resolve(pointer, where)
        compiled: list[_Check] = []

        def follow(value: Any, path: _Path, depth: int) -> None:
            compiled[0](value, path, depth)

        self.refs[pointer] = follow  # recursive schemas reach this before it is compiled
        compiled.append(self.compile(target, pointer))
        return follow

    def _resolve(self, pointer: str, where: str) -> Any:
        fragment = pointer[1:]
        node: Any = self.root
        if fragment in ("", "/"):
            return node if fragment == "" else _step(node, "", pointer, where)
        if not fragment.startswith("/"):
            raise SchemaError(f"{where}: anchors are not supported, got $ref {pointer!r}")
        for raw in fragment[1:].split("/"):
            token = _unescape(raw)
            node = _step(node, token, pointer, where)
        return node


def _unescape(token: str) -> str:
    from urllib.parse import unquote

    return unquote(token).replace("~1", "/").replace("~0", "~")


def _step(node: Any, token: str, pointer: str, where: str) -> Any:
    if isinstance(node, Mapping) and token in node:
        return node[token]
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    raise SchemaError(f"{where}: cannot resolve $ref {pointer!r}")


def _accept(value: Any, path: _Path, depth: int) -> None:
    return None


def _refuse(value: Any, path: _Path, depth: int) -> None:
    raise _Invalid(path, "no value is allowed here")


def _need(condition: bool, where: str, what: str) -> None:
    if not condition:
        raise SchemaError(f"{where}: {what}")


def _is_count(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (
        isinstance(value, float) and value.is_integer() and value >= 0
    )


def _is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _view(value: Any) -> Any:
    return value if type(value) in _PLAIN else _as_json(value)


# each builder: (compiler, the schema object, location of the keyword) -> check


def _b_type(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    declared = s["type"]
    names = [declared] if isinstance(declared, str) else declared
    _need(
        isinstance(names, list) and all(n in _TYPE_NAMES for n in names),
        where,
        f"unknown type {declared!r}",
    )
    allowed = tuple(dict.fromkeys(names))
    expected = " or ".join(allowed) or "nothing"

    def check(value: Any, path: _Path, depth: int) -> None:
        value = _view(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise _Invalid(path, f"expected {expected}, got the non-finite number {value!r}")
        for name in allowed:
            if _is_type(value, name):
                return
        raise _Invalid(path, f"expected {expected}, got {_json_type(value)} {_short(value)}")

    return check


def _b_enum(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    options = s["enum"]
    _need(isinstance(options, list), where, "enum must be an array")
    keys = {_canonical(o) for o in options}
    listing = ", ".join(_short(o) for o in options[:10]) + (", ..." if len(options) > 10 else "")

    def check(value: Any, path: _Path, depth: int) -> None:
        if _canonical(_deep_view(value, depth)) not in keys:
            raise _Invalid(path, f"expected one of {listing}, got {_short(value)}")

    return check


def _b_const(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    key = _canonical(s["const"])
    shown = _short(s["const"])

    def check(value: Any, path: _Path, depth: int) -> None:
        if _canonical(_deep_view(value, depth)) != key:
            raise _Invalid(path, f"expected {shown}, got {_short(value)}")

    return check


def _deep_view(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise RecursionError
    value = _view(value)
    if isinstance(value, list):
        return [_deep_view(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: _deep_view(v, depth + 1) for k, v in value.items()}
    return value


def _subschemas(c: _Compiler, s: Mapping[str, Any], keyword: str, where: str) -> list[_Check]:
    members = s[keyword]
    _need(
        isinstance(members, list) and len(members) > 0,
        where,
        f"{keyword} must be a non-empty array",
    )
    return [c.compile(m, f"{where}/{i}") for i, m in enumerate(members)]


def _b_all_of(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    members = _subschemas(c, s, "allOf", where)

    def check(value: Any, path: _Path, depth: int) -> None:
        for member in members:
            member(value, path, depth)

    return check


def _b_any_of(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    members = _subschemas(c, s, "anyOf", where)

    def check(value: Any, path: _Path, depth: int) -> None:
        first: _Invalid | None = None
        for member in members:
            try:
                member(value, path, depth)
            except _Invalid as exc:
                first = first or exc
            else:
                return
        assert first is not None
        if len(members) == 1:
            raise first
        raise _Invalid(
            path, f"matches none of the {len(members)} allowed schemas ({first.message})"
        )

    return check


def _b_one_of(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    members = _subschemas(c, s, "oneOf", where)

    def check(value: Any, path: _Path, depth: int) -> None:
        matched = 0
        first: _Invalid | None = None
        for member in members:
            try:
                member(value, path, depth)
            except _Invalid as exc:
                first = first or exc
            else:
                matched += 1
        if matched == 1:
            return
        if matched == 0:
            assert first is not None
            raise _Invalid(path, f"matches none of the oneOf schemas ({first.message})")
        raise _Invalid(path, f"matches {matched} of the oneOf schemas; exactly one is allowed")

    return check


def _b_not(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    inner = c.compile(s["not"], where)

    def check(value: Any, path: _Path, depth: int) -> None:
        try:
            inner(value, path, depth)
        except _Invalid:
            return
        raise _Invalid(path, "matches a schema it must not match")

    return check


def _b_if(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    condition = c.compile(s["if"], where)
    then = c.compile(s["then"], where[:-2] + "then") if "then" in s else _accept
    otherwise = c.compile(s["else"], where[:-2] + "else") if "else" in s else _accept

    def check(value: Any, path: _Path, depth: int) -> None:
        try:
            condition(value, path, depth)
        except _Invalid:
            otherwise(value, path, depth)
        else:
            then(value, path, depth)

    return check


def _b_ref(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    return c.ref(s["$ref"], where)


# -- objects --------------------------------------------------------------------------------


def _b_object(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    base = where
    properties = s.get("properties", {})
    _need(isinstance(properties, Mapping), f"{base}/properties", "properties must be an object")
    props = {k: c.compile(v, f"{base}/properties/{k}") for k, v in properties.items()}
    patterns_raw = s.get("patternProperties", {})
    _need(isinstance(patterns_raw, Mapping), f"{base}/patternProperties", "must be an object")
    patterns = [
        (
            compile_pattern(p, f"{base}/patternProperties"),
            c.compile(v, f"{base}/patternProperties/{p}"),
        )
        for p, v in patterns_raw.items()
    ]
    extra_schema = s.get("additionalProperties", True)
    extra = c.compile(extra_schema, f"{base}/additionalProperties")
    closed = extra_schema is False
    required = s.get("required", [])
    _need(
        isinstance(required, list) and all(isinstance(r, str) for r in required),
        f"{base}/required",
        "required must be an array of strings",
    )
    names = (
        c.compile(s["propertyNames"], f"{base}/propertyNames") if "propertyNames" in s else None
    )
    low = s.get("minProperties", 0)
    high = s.get("maxProperties")
    _need(_is_count(low) and (high is None or _is_count(high)), base, "bad min/maxProperties")
    dep_required = s.get("dependentRequired", {})
    _need(isinstance(dep_required, Mapping), f"{base}/dependentRequired", "must be an object")
    dep_raw = s.get("dependentSchemas", {})
    _need(isinstance(dep_raw, Mapping), f"{base}/dependentSchemas", "must be an object")
    dep_schemas = {k: c.compile(v, f"{base}/dependentSchemas/{k}") for k, v in dep_raw.items()}
    trivial_extra = extra is _accept

    def check(value: Any, path: _Path, depth: int) -> None:
        value = _view(value)
        if not isinstance(value, dict):
            return
        if depth >= MAX_DEPTH:
            raise _Invalid(path, f"nested deeper than {MAX_DEPTH} levels")
        for key in required:
            if key not in value:
                raise _Invalid(path, f"missing required property {key!r}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Invalid(path, f"property names are strings, got {_short(key)}")
            here = (*path, key)
            known = False
            sub = props.get(key)
            if sub is not None:
                known = True
                sub(item, here, depth + 1)
            for pattern, sub in patterns:
                if pattern.search(key):
                    known = True
                    sub(item, here, depth + 1)
            if not known and not trivial_extra:
                if closed:
                    allowed = ", ".join(repr(p) for p in props) or "none"
                    raise _Invalid(path, f"unexpected property {key!r} (allowed: {allowed})")
                extra(item, here, depth + 1)
            if names is not None:
                names(key, here, depth + 1)
        if len(value) < low:
            raise _Invalid(path, f"expected at least {low} properties, got {len(value)}")
        if high is not None and len(value) > high:
            raise _Invalid(path, f"expected at most {high} properties, got {len(value)}")
        for key, needs in dep_required.items():
            if key in value:
                for other in needs:
                    if other not in value:
                        raise _Invalid(path, f"property {other!r} is required with {key!r}")
        for key, sub in dep_schemas.items():
            if key in value:
                sub(value, path, depth)

    return check


# -- arrays ---------------------------------------------------------------------------------


def _b_array(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    base = where
    prefix_raw = s.get("prefixItems")
    items_raw = s.get("items", True)
    if isinstance(items_raw, list):  # draft-07 tuple form
        prefix_raw, items_raw = items_raw, s.get("additionalItems", True)
    prefix = [c.compile(p, f"{base}/prefixItems/{i}") for i, p in enumerate(prefix_raw or [])]
    rest = c.compile(items_raw, f"{base}/items")
    low = s.get("minItems", 0)
    high = s.get("maxItems")
    _need(_is_count(low) and (high is None or _is_count(high)), base, "bad minItems/maxItems")
    unique = s.get("uniqueItems", False) is True
    contains = c.compile(s["contains"], f"{base}/contains") if "contains" in s else None
    min_contains = s.get("minContains", 1)
    max_contains = s.get("maxContains")
    _need(
        _is_count(min_contains) and (max_contains is None or _is_count(max_contains)),
        base,
        "bad minContains/maxContains",
    )

    def check(value: Any, path: _Path, depth: int) -> None:
        value = _view(value)
        if not isinstance(value, list):
            return
        if depth >= MAX_DEPTH:
            raise _Invalid(path, f"nested deeper than {MAX_DEPTH} levels")
        if len(value) < low:
            raise _Invalid(path, f"expected at least {low} items, got {len(value)}")
        if high is not None and len(value) > high:
            raise _Invalid(path, f"expected at most {high} items, got {len(value)}")
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else rest
            if sub is not _accept:
                sub(item, (*path, i), depth + 1)
        if unique:
            seen: set[Any] = set()
            for i, item in enumerate(value):
                key = _canonical(_deep_view(item, depth + 1))
                if key in seen:
                    raise _Invalid((*path, i), "duplicate item; items must be unique")
                seen.add(key)
        if contains is not None:
            matches = 0
            for i, item in enumerate(value):
                try:
                    contains(item, (*path, i), depth + 1)
                except _Invalid:
                    continue
                matches += 1
            if matches < min_contains:
                raise _Invalid(
                    path, f"expected at least {min_contains} matching items, got {matches}"
                )
            if max_contains is not None and matches > max_contains:
                raise _Invalid(
                    path, f"expected at most {max_contains} matching items, got {matches}"
                )

    return check


# -- numbers and strings --------------------------------------------------------------------


def _b_number(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    base = where
    bounds: list[tuple[Any, Callable[[Any, Any], bool], str]] = []
    minimum, maximum = s.get("minimum"), s.get("maximum")
    ex_min, ex_max = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
    for label, bound in (("minimum", minimum), ("maximum", maximum)):
        _need(bound is None or _is_num(bound), f"{base}/{label}", "must be a number")
    if ex_min is True and minimum is not None:  # draft-04
        bounds.append((minimum, lambda v, b: v > b, "greater than"))
    elif minimum is not None:
        bounds.append((minimum, lambda v, b: v >= b, "at least"))
    if ex_max is True and maximum is not None:
        bounds.append((maximum, lambda v, b: v < b, "less than"))
    elif maximum is not None:
        bounds.append((maximum, lambda v, b: v <= b, "at most"))
    if not isinstance(ex_min, bool) and ex_min is not None:
        _need(_is_num(ex_min), f"{base}/exclusiveMinimum", "must be a number")
        bounds.append((ex_min, lambda v, b: v > b, "greater than"))
    if not isinstance(ex_max, bool) and ex_max is not None:
        _need(_is_num(ex_max), f"{base}/exclusiveMaximum", "must be a number")
        bounds.append((ex_max, lambda v, b: v < b, "less than"))
    step = s.get("multipleOf")
    _need(step is None or (_is_num(step) and step > 0), f"{base}/multipleOf", "must be > 0")

    def check(value: Any, path: _Path, depth: int) -> None:
        value = _view(value)
        if not isinstance(value, int | float) or isinstance(value, bool):
            return
        if isinstance(value, float) and not math.isfinite(value):
            raise _Invalid(path, f"expected a finite number, got {value!r}")
        for bound, ok, words in bounds:
            if not ok(value, bound):
                raise _Invalid(path, f"expected a number {words} {bound!r}, got {_short(value)}")
        if step is not None and not _multiple(value, step):
            raise _Invalid(path, f"expected a multiple of {step!r}, got {_short(value)}")

    return check


def _multiple(value: int | float, step: int | float) -> bool:
    if isinstance(step, float):  # the same arithmetic as jsonschema, without its overflow
        try:
            quotient = value / step
            return int(quotient) == quotient
        except OverflowError:  # a huge integer: exact arithmetic
            return (Fraction(value) / Fraction(step)).denominator == 1
    return not (value % step)


def _b_string(c: _Compiler, s: Mapping[str, Any], where: str) -> _Check:
    base = where
    low = s.get("minLength", 0)
    high = s.get("maxLength")
    _need(_is_count(low) and (high is None or _is_count(high)), base, "bad minLength/maxLength")
    pattern = compile_pattern(s["pattern"], f"{base}/pattern") if "pattern" in s else None

    def check(value: Any, path: _Path, depth: int) -> None:
        value = _view(value)
        if not isinstance(value, str):
            return
        if len(value) < low:
            raise _Invalid(path, f"expected at least {low} characters, got {len(value)}")
        if high is not None and len(value) > high:
            raise _Invalid(path, f"expected at most {high} characters, got {len(value)}")
        if pattern is not None and not pattern.search(value):
            raise _Invalid(path, f"{_short(value)} does not match the pattern {pattern.pattern!r}")

    return check


_OBJECT_KEYWORDS: Final = (
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
)
_ARRAY_KEYWORDS: Final = (
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
)
_NUMBER_KEYWORDS: Final = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
)
_STRING_KEYWORDS: Final = ("minLength", "maxLength", "pattern")


_SINGLE: Final[tuple[tuple[str, Callable[[_Compiler, Mapping[str, Any], str], _Check]], ...]] = (
    ("type", _b_type),
    ("enum", _b_enum),
    ("const", _b_const),
    ("$ref", _b_ref),
    ("allOf", _b_all_of),
    ("anyOf", _b_any_of),
    ("oneOf", _b_one_of),
    ("not", _b_not),
    ("if", _b_if),
)
_GROUPS: Final[
    tuple[tuple[tuple[str, ...], Callable[[_Compiler, Mapping[str, Any], str], _Check]], ...]
] = (
    (_OBJECT_KEYWORDS, _b_object),
    (_ARRAY_KEYWORDS, _b_array),
    (_NUMBER_KEYWORDS, _b_number),
    (_STRING_KEYWORDS, _b_string),
)
