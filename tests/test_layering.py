"""Imports flow downward through the layers of docs/architecture.md, never up, not even lazily.

Every module of the package is parsed with :mod:`ast`; every ``import`` and ``from ... import``
anywhere in it (module level, inside functions, inside ``try``) is checked against the layer
order. Imports under ``if TYPE_CHECKING:`` never run, so they may name any layer (they exist
for annotations only). A violation is reported by module and line.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator

import attrs
import pytest

import lionexec

PACKAGE_DIR = pathlib.Path(lionexec.__file__).parent

#: Bottom helpers every layer may import (besides every private top-level module,
#: ``lionexec._*``). They may import only one another.
BOTTOM = frozenset({"lionexec.errors"})

#: Layer rank of each top-level part of the package (docs/architecture.md, "Layers"). A module
#: may import its own part, the bottom helpers, and parts of strictly lower rank.
RANKS: dict[str, int] = {
    "engine": 1,
    "limits": 1,
    "tools": 2,
    "governance": 3,
    "conversation": 3,
    "sandbox": 3,
    "act": 4,
    "journal": 5,
    "models": 5,
    "serialization": 6,
    "testing": 6,
    "mcp": 6,
    "otel": 6,
    "demo": 6,
    "server": 6,
    "abc": 6,
    "__main__": 6,
}
#: Edges may use one another (the CLI runs the demo); siblings below them may not.
SHARED_RANK = {6}
#: ``lionexec/__init__.py`` curates the public API from every part; nothing imports it.
ROOT_RANK = 7


def part_of(module: str) -> str | None:
    """The part (``"engine"``, ``"serialization"``, ...) of a lionexec module, else None."""
    if module == "lionexec":
        return "lionexec"
    if not module.startswith("lionexec."):
        return None
    part = module.split(".")[1]
    if module in BOTTOM or (part.startswith("_") and part != "__main__"):
        return "bottom"
    return part


def rank_of(part: str) -> int:
    if part == "lionexec":
        return ROOT_RANK
    if part == "bottom":
        return 0
    if part not in RANKS:
        raise AssertionError(
            f"lionexec.{part} has no layer: add it to RANKS in tests/test_layering.py "
            "(and to the layers of docs/architecture.md)"
        )
    return RANKS[part]


def may_import(importer: str, imported: str) -> bool:
    """Whether module *importer* may import module *imported* (both lionexec modules)."""
    source, target = part_of(importer), part_of(imported)
    assert source is not None and target is not None
    if target == "bottom" or source == target:
        return True
    if target == "lionexec":
        return False  # the root imports everything; importing it from inside is a cycle
    source_rank, target_rank = rank_of(source), rank_of(target)
    if source_rank == target_rank:
        return source_rank in SHARED_RANK
    return target_rank < source_rank


def module_name(path: pathlib.Path) -> str:
    relative = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(name: str) -> bool:
    relative = pathlib.Path(*name.split(".")[1:]) if "." in name else pathlib.Path()
    return (PACKAGE_DIR / relative / "__init__.py").is_file()


def is_module(name: str) -> bool:
    if not name.startswith("lionexec"):
        return False
    relative = pathlib.Path(*name.split(".")[1:]) if "." in name else pathlib.Path()
    return is_package(name) or (PACKAGE_DIR / relative).with_suffix(".py").is_file()


@attrs.frozen
class Import:
    importer: str
    imported: str
    line: int
    type_checking: bool


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, package: str) -> None:
        self.module = module
        self.package = package
        self.found: list[Import] = []
        self._type_checking = 0

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        guarded = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        if guarded:
            self._type_checking += 1
            for child in node.body:
                self.visit(child)
            self._type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _add(self, imported: str, line: int) -> None:
        self.found.append(Import(self.module, imported, line, self._type_checking > 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "lionexec" or alias.name.startswith("lionexec."):
                self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            if node.level > 1:
                base = base[: -(node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if not (target == "lionexec" or target.startswith("lionexec.")):
            return
        for alias in node.names:
            submodule = f"{target}.{alias.name}"
            self._add(submodule if is_module(submodule) else target, node.lineno)


def imports_of(source: str, module: str, *, is_init: bool = False) -> list[Import]:
    package = module if is_init else module.rpartition(".")[0]
    collector = _Collector(module, package)
    collector.visit(ast.parse(source))
    return collector.found


def all_imports() -> Iterator[Import]:
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = module_name(path)
        yield from imports_of(
            path.read_text(encoding="utf-8"), module, is_init=path.name == "__init__.py"
        )


def violations(found: list[Import]) -> list[str]:
    return [
        f"{i.importer} (line {i.line}) imports {i.imported}"
        for i in found
        if not i.type_checking and not may_import(i.importer, i.imported)
    ]


def test_every_module_of_the_package_belongs_to_a_layer() -> None:
    for path in PACKAGE_DIR.rglob("*.py"):
        part = part_of(module_name(path))
        assert part is not None
        rank_of(part)


def test_no_module_imports_a_higher_layer_not_even_lazily() -> None:
    found = violations(list(all_imports()))
    assert found == [], "imports against the layer order of docs/architecture.md:\n" + "\n".join(
        found
    )


# -- the checker itself -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("importer", "source", "expected"),
    [
        # a lazy import inside a function, upward: caught, with its line
        (
            "lionexec.engine._event",
            "def f():\n    from lionexec.serialization import converter\n",
            ["lionexec.engine._event (line 2) imports lionexec.serialization"],
        ),
        # a relative import two levels up, into a higher layer
        (
            "lionexec.tools._tool",
            "from ..act import Branch\n",
            ["lionexec.tools._tool (line 1) imports lionexec.act"],
        ),
        # the submodule form: `from lionexec import serialization`
        (
            "lionexec.act.log",
            "def f():\n    from lionexec import serialization\n",
            ["lionexec.act.log (line 2) imports lionexec.serialization"],
        ),
        # the root package from inside
        ("lionexec.act.log", "import lionexec\n", ["lionexec.act.log (line 1) imports lionexec"]),
        # siblings of one layer stay independent
        (
            "lionexec.governance._gates",
            "from lionexec.conversation import Message\n",
            ["lionexec.governance._gates (line 1) imports lionexec.conversation"],
        ),
        # allowed: downward, bottom helpers, own layer, type-checking only
        (
            "lionexec.act.branch",
            "from lionexec.engine import Event\nfrom .._failures import FailureLog\n"
            "from .log import EventLog\nfrom typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from lionexec.serialization import converter\n",
            [],
        ),
        ("lionexec.serialization", "from .act import Branch\n", []),
        # a bottom helper is bottom: it may not lean on a layer
        (
            "lionexec._failures",
            "from lionexec.engine import Event\n",
            ["lionexec._failures (line 1) imports lionexec.engine"],
        ),
        ("lionexec.__main__", "from .demo import main\n", []),
    ],
)
def test_the_checker_finds_upward_imports(importer: str, source: str, expected: list[str]) -> None:
    assert violations(imports_of(source, importer)) == expected


# -- serialization through the registration module ----------------------------------------------


def run_fresh(code: str) -> str:
    """Run *code* in a fresh interpreter; return its stdout."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    return result.stdout.strip()


def test_lower_layers_reach_the_converter_without_importing_serialization() -> None:
    # Importing only the engine still registers the converter (the package imports
    # serialization first), and it is built on first use, not at import.
    out = run_fresh(
        "import lionexec._unstructure as u\n"
        "from lionexec.engine import Event\n"
        "print(u._built is None)\n"
        "record = Event().to_dict()\n"
        "import lionexec.serialization as s\n"
        "print(u._built is s.converter, sorted(record['execution']))\n"
    )
    assert out.splitlines() == [
        "True",
        "True ['duration', 'error', 'response', 'retryable', 'status']",
    ]


# -- the shape inside the layers ---------------------------------------------------------------

#: The extension points: each folder has a ``base.py`` (the protocol) and one module per
#: implementation. An implementation imports, of its own folder, only ``base`` and the shared
#: helper modules named here, never a sibling implementation.
EXTENSION_FOLDERS: dict[str, frozenset[str]] = {
    "lionexec.act.sinks": frozenset(),
    "lionexec.conversation.formats": frozenset(),
    "lionexec.governance.subjects": frozenset({"_programs", "_glob"}),
    "lionexec.journal.backends": frozenset({"_sql", "_log", "_bulk", "_postgres_trio"}),
    "lionexec.models.formats": frozenset(),
}

#: No module of the package is longer than this: a file that outgrows it does several jobs.
MAX_LINES = 900


def cycles(found: list[Import]) -> list[list[str]]:
    """The import circles among lionexec modules (strongly connected components of two or
    more modules, or a module importing itself), lazy imports included, ``TYPE_CHECKING``
    imports left out (they never run)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for i in found:
        if not i.type_checking and i.importer != i.imported:
            graph[i.importer].add(i.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def test_no_import_circle_anywhere_in_the_package_not_even_lazily() -> None:
    found = cycles(list(all_imports()))
    assert found == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_module_is_longer_than_the_limit() -> None:
    long = [
        f"{path.relative_to(PACKAGE_DIR.parent)}: {n} lines"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert long == [], f"modules over {MAX_LINES} lines:\n" + "\n".join(long)


def extension_violations(found: list[Import]) -> list[str]:
    wrong = []
    for i in found:
        folder, _, name = i.importer.rpartition(".")
        if folder not in EXTENSION_FOLDERS or name in ("base", "__init__") or i.type_checking:
            continue
        # ``from . import base`` names the folder itself; the collector resolves submodules.
        target_folder, _, target = i.imported.rpartition(".")
        if i.imported == folder:
            wrong.append(f"{i.importer} (line {i.line}) imports its folder's __init__")
        elif (
            target_folder == folder
            and target != "base"
            and target not in EXTENSION_FOLDERS[folder]
        ):
            wrong.append(f"{i.importer} (line {i.line}) imports {i.imported}")
    return list(dict.fromkeys(wrong))


def test_extension_points_have_a_base_and_implementations_import_only_it() -> None:
    for folder in EXTENSION_FOLDERS:
        path = PACKAGE_DIR.parent.joinpath(*folder.split("."))
        assert (path / "base.py").is_file(), f"{folder} has no base.py"
    found = extension_violations(list(all_imports()))
    assert found == [], "\n".join(found)


def test_the_circle_finder_finds_lazy_circles_and_ignores_type_checking() -> None:
    found = [
        Import("lionexec.journal.a", "lionexec.journal.b", 1, False),
        Import("lionexec.journal.b", "lionexec.journal.a", 9, False),  # lazy, inside a function
        Import("lionexec.act.x", "lionexec.act.y", 1, False),
        Import("lionexec.act.y", "lionexec.act.x", 2, True),  # annotations only
    ]
    assert cycles(found) == [["lionexec.journal.a", "lionexec.journal.b"]]


def test_the_extension_check_refuses_a_sibling_implementation() -> None:
    found = imports_of(
        "from .base import Backend\nfrom ._sql import Tx\nfrom ._sqlite import SqliteJournal\n",
        "lionexec.journal.backends._postgres",
    )
    assert extension_violations(found) == [
        "lionexec.journal.backends._postgres (line 3) imports lionexec.journal.backends._sqlite"
    ]
