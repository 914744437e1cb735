"""The public surface, presented as trio presents its own.

* Each public namespace (``lionexec``, every layer package, :mod:`lionexec.errors`,
  :mod:`lionexec.serialization`, :mod:`lionexec.testing`) has a sorted ``__all__`` of names it
  really has, and a package re-exports in the ``from .x import X as X`` form.
* Every public name has one home: the namespace named by its ``__module__`` (classes and
  functions report the package users import them from, not a private module). It is exported
  from its home and, at most, also from ``lionexec`` itself, always as the same object.
* Every public name has a docstring (or, for constants and aliases, a ``#:`` doc comment) and
  appears in ``docs/api.md``.
* Every exception of :mod:`lionexec.errors` is exported from ``lionexec``.
* One version source; a license file that matches ``pyproject.toml``; a changelog.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import pathlib
import pickle
import re
import tomllib
import types
import typing
from collections import defaultdict
from typing import Any

import pytest

import lionexec

ROOT = pathlib.Path(lionexec.__file__).parent
PROJECT = pathlib.Path(__file__).resolve().parent.parent  # the checkout (docs/), not site-packages
API_DOC = (PROJECT / "docs" / "api.md").read_text(encoding="utf-8")

PUBLIC_MODULES = ("lionexec.abc", "lionexec.errors", "lionexec.serialization", "lionexec.testing")
PACKAGES = tuple(
    sorted(
        f"lionexec.{path.parent.name}"
        for path in ROOT.glob("*/__init__.py")
        if not path.parent.name.startswith("_")
    )
)
NAMESPACES = ("lionexec", *PACKAGES, *PUBLIC_MODULES)


def namespace(name: str) -> types.ModuleType:
    return importlib.import_module(name)


def exported(name: str) -> list[str]:
    return list(namespace(name).__all__)


def is_homed(obj: object) -> bool:
    """Classes and functions name their home in ``__module__``; other values do not."""
    return isinstance(obj, type | types.FunctionType)


def isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: SCREAMING_CASE, then CamelCase, then the rest."""
    if name.isupper() or (name.upper() == name and "_" in name):
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


@pytest.mark.parametrize("name", NAMESPACES)
def test_all_is_sorted_unique_and_real(name: str) -> None:
    names = exported(name)
    assert names == sorted(names, key=isort_key), f"{name}.__all__ is not sorted"
    assert len(names) == len(set(names)), f"{name}.__all__ lists a name twice"
    module = namespace(name)
    missing = [n for n in names if not hasattr(module, n)]
    assert missing == [], f"{name}.__all__ names what it does not have: {missing}"


@pytest.mark.parametrize("name", ("lionexec", *PACKAGES))
def test_packages_re_export_as_x_as_x(name: str) -> None:
    package_dir = ROOT if name == "lionexec" else ROOT / name.split(".")[1]
    tree = ast.parse((package_dir / "__init__.py").read_text(encoding="utf-8"))
    wrong = [
        f"line {node.lineno}: {alias.name}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        and (node.level or (node.module or "").startswith("lionexec"))
        for alias in node.names
        if alias.asname != alias.name and not (alias.asname or "").startswith("_")
    ]
    assert wrong == [], f"{name} re-exports without 'X as X': {wrong}"


def homes() -> dict[int, list[tuple[str, str]]]:
    """id(object) -> [(namespace, name), ...] for every export of every public namespace."""
    found: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for space in NAMESPACES:
        for name in exported(space):
            found[id(getattr(namespace(space), name))].append((space, name))
    return found


def all_public() -> list[tuple[str, str, Any]]:
    return [
        (space, name, getattr(namespace(space), name))
        for space in NAMESPACES
        for name in exported(space)
    ]


def test_classes_and_functions_report_their_public_home() -> None:
    wrong = []
    for space, name, obj in all_public():
        if not is_homed(obj) or obj.__name__ != name:
            continue  # values, and aliases under another name
        home = obj.__module__
        if home not in NAMESPACES or getattr(namespace(home), name, None) is not obj:
            wrong.append(f"{space}.{name} has __module__ {home!r}")
        elif name not in exported(home):
            wrong.append(f"{space}.{name}: its home {home} does not export it")
    wrong = sorted(set(wrong))
    assert wrong == [], "\n".join(wrong)


def test_every_name_is_exported_from_one_home_and_at_most_the_root() -> None:
    twice = []
    by_name: dict[str, list[str]] = defaultdict(list)
    for space, name, _obj in all_public():
        if space != "lionexec":
            by_name[name].append(space)
    for name, spaces in by_name.items():
        if len(spaces) > 1:
            twice.append(f"{name} is exported from {spaces}")
        obj = getattr(namespace(spaces[0]), name)
        if is_homed(obj) and obj.__module__ == "lionexec" and obj.__name__ == name:
            twice.append(f"{name} lives in lionexec but is exported from {spaces} too")
    for space, name, obj in all_public():
        if (
            space == "lionexec"
            and is_homed(obj)
            and obj.__name__ == name
            and obj.__module__ != "lionexec"
            and (obj.__module__ not in NAMESPACES or name not in exported(obj.__module__))
        ):
            twice.append(f"lionexec.{name} is not exported from its home {obj.__module__}")
        if space == "lionexec" and name in by_name:
            homes_ = by_name[name]
            if getattr(namespace(homes_[0]), name) is not obj:
                twice.append(f"lionexec.{name} is not the object {homes_[0]}.{name}")
    assert twice == [], "\n".join(twice)


def test_every_error_is_exported_from_lionexec() -> None:
    import lionexec.errors as errors

    missing = [
        name
        for name in errors.__all__
        if isinstance(getattr(errors, name), type)
        and issubclass(getattr(errors, name), BaseException)
        and getattr(lionexec, name, None) is not getattr(errors, name)
    ]
    assert missing == [], f"errors not exported from lionexec: {missing}"


def test_named_public_classes_are_exported_from_lionexec() -> None:
    for name in (
        "ProcessorStatistics",
        "GateDenied",
        "MessageNotFoundError",
        "ProcessorBusyError",
    ):
        assert name in lionexec.__all__


_SOURCES = {path: path.read_text(encoding="utf-8") for path in ROOT.rglob("*.py")}


def has_doc_comment(name: str) -> bool:
    """A ``#:`` comment right above ``name = ...`` / ``name: T = ...``, or a string after it."""
    pattern = re.compile(
        rf"^(?:#:.*\n)+{re.escape(name)}\b\s*[:=]|^{re.escape(name)}\b.*\n(?:\s*\S.*\n)*?\s*\"\"\"",
        re.MULTILINE,
    )
    return any(pattern.search(source) for source in _SOURCES.values())


def test_every_public_name_has_a_docstring() -> None:
    undocumented = []
    for space, name, obj in all_public():
        if isinstance(obj, types.ModuleType):
            continue
        if is_homed(obj):
            if not (obj.__doc__ or "").strip():
                undocumented.append(f"{space}.{name}")
        elif not has_doc_comment(name):
            undocumented.append(f"{space}.{name} (a value: give it a #: comment)")
    undocumented = sorted(set(undocumented))
    assert undocumented == [], "\n".join(undocumented)


def documented_modules() -> set[str]:
    """Modules whose members docs/api.md documents wholesale (automodule without no-members)."""
    found = set()
    for match in re.finditer(r"\.\. automodule:: (\S+)\n((?:[ \t]+:.*\n)*)", API_DOC):
        if ":no-members:" not in match.group(2):
            found.add(match.group(1))
    return found


def test_every_public_name_appears_in_the_api_docs() -> None:
    wholesale = documented_modules()
    missing = []
    for space, name, _obj in all_public():
        if space == "lionexec" and name in {n for s in NAMESPACES[1:] for n in exported(s)}:
            continue  # documented at its home
        if space in wholesale or f"{space}.{name}" in API_DOC:
            continue
        missing.append(f"{space}.{name}")
    missing = sorted(set(missing))
    assert missing == [], "\n".join(missing)


def test_records_pickle_under_their_public_home() -> None:
    failure = lionexec.ReportedFailure(where="observer", error=ValueError("x"), culprit="f")
    loaded = pickle.loads(pickle.dumps(failure))
    assert (loaded.where, loaded.culprit, type(loaded)) == (
        "observer",
        "f",
        lionexec.ReportedFailure,
    )
    decision = lionexec.PermissionDecision("allow", "f", "f", "allowed")
    assert pickle.loads(pickle.dumps(decision)) == decision


def test_re_homed_classes_still_resolve_their_annotations() -> None:
    # A subclass of a re-homed class (users subclass Event) must still resolve its hints:
    # cattrs relies on typing.get_type_hints.
    class Mine(lionexec.Event):
        extra: int = 0

    hints = typing.get_type_hints(Mine)
    assert hints["execution"] is lionexec.Execution
    assert hints["extra"] is int


# -- version, license, changelog ----------------------------------------------------------------

PYPROJECT = tomllib.loads((PROJECT / "pyproject.toml").read_text(encoding="utf-8"))


def test_one_version_source() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project.get("dynamic", [])
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "lionexec/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:[.-]?\w+)?", lionexec.__version__)
    assert importlib.metadata.version("lionexec") == lionexec.__version__


def test_the_license_file_matches_pyproject() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (PROJECT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert "LICENSE" in PYPROJECT["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]


def test_a_changelog_in_keep_a_changelog_form() -> None:
    text = (PROJECT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog")
    assert "## [Unreleased]" in text
    assert "keepachangelog.com" in text
