"""How the journal package is laid out: its parts import one another without a cycle (lazy
imports included), the backends know nothing of the journal above them, approvals and
recovery take the commit engine rather than the journal, no module is too long, and the old
module paths still work for one release, with a ``DeprecationWarning`` naming the new home."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest

import lionexec.journal as journal
import lionexec.journal.backends as backends
import lionexec.journal.workers as workers
import lionexec.limits

from ..test_layering import PACKAGE_DIR, Import, imports_of, module_name

ROOT = PACKAGE_DIR / "journal"
#: Still the other area's (it moves to a package of its own).
NOT_OURS = {"lionexec.journal.limits"}
SHIMS = ("api", "approvals", "backend", "jsonl", "postgres", "queue", "sqlite", "worker")


def runtime_imports() -> Iterator[Import]:
    """Every import of a journal module that runs (lazy ones included, type-checking ones
    not), of another journal module."""
    for path in sorted(ROOT.rglob("*.py")):
        module = module_name(path)
        for found in imports_of(
            path.read_text(encoding="utf-8"), module, is_init=path.name == "__init__.py"
        ):
            if not found.type_checking and found.imported.startswith("lionexec.journal."):
                yield found


def graph(*, with_parents: bool) -> dict[str, set[str]]:
    """Module -> the journal modules it imports. *with_parents*: importing ``a.b.c`` also
    runs the ``__init__`` of ``a.b`` (not of the package the importer is in)."""
    edges: dict[str, set[str]] = {module_name(p): set() for p in ROOT.rglob("*.py")}
    for found in runtime_imports():
        edges[found.importer].add(found.imported)
        if with_parents:
            parts = found.imported.split(".")
            for end in range(3, len(parts)):
                parent = ".".join(parts[:end])
                if not (found.importer + ".").startswith(parent + "."):
                    edges[found.importer].add(parent)
    for module, targets in edges.items():
        targets.discard(module)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges.get(node, ()):
            if target not in edges:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("with_parents", [False, True])
def test_no_import_cycle_inside_the_journal(with_parents: bool) -> None:
    assert cycles(graph(with_parents=with_parents)) == []


def test_the_backends_import_nothing_of_the_journal_above_them() -> None:
    wrong = [
        f"{i.importer} (line {i.line}) imports {i.imported}"
        for i in runtime_imports()
        if i.importer.startswith("lionexec.journal.backends")
        and not i.imported.startswith("lionexec.journal.backends")
        and i.imported != "lionexec.journal.errors"
    ]
    assert wrong == []


@pytest.mark.parametrize("module", ["_approvals", "_recovery", "_sink", "_commit", "_submitted"])
def test_the_parts_below_the_facade_do_not_import_it(module: str) -> None:
    facade = {"lionexec.journal._journal", "lionexec.journal._open", "lionexec.journal"}
    reached, todo = set(), [f"lionexec.journal.{module}"]
    edges = graph(with_parents=True)
    while todo:
        current = todo.pop()
        for target in edges.get(current, ()):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    assert reached & facade == set()


def test_no_module_of_the_journal_is_longer_than_900_lines() -> None:
    long = {
        module_name(path): lines
        for path in ROOT.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) >= 900
        and module_name(path) not in NOT_OURS
    }
    assert long == {}


def test_importing_the_journal_does_not_import_psycopg() -> None:
    code = (
        "import sys, lionexec.journal, lionexec.journal.backends, lionexec.journal.workers\n"
        "print('psycopg' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


def test_the_backend_protocols_are_runtime_checkable() -> None:
    backend = backends.MemoryBackend()
    assert isinstance(backend, backends.Backend)
    assert isinstance(backend.store, backends.Store)
    assert backends.PostgresBackend.__module__ == "lionexec.journal.backends"
    assert journal.PostgresJournal.__module__ == "lionexec.journal"
    assert workers.Worker.__module__ == "lionexec.journal.workers"


def fresh_import(name: str) -> tuple[object, list[warnings.WarningMessage]]:
    sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(name)
    return module, caught


@pytest.mark.parametrize("old", SHIMS)
def test_an_old_module_path_warns_once_and_gives_the_same_objects(old: str) -> None:
    name = f"lionexec.journal.{old}"
    module, caught = fresh_import(name)
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    message = str(deprecations[0].message)
    assert message.startswith(f"{name} is deprecated: ")
    assert "lionexec.journal" in message.removeprefix(f"{name} is deprecated: ")
    homes = (journal, backends, workers, lionexec.limits)
    for attribute in module.__all__:  # type: ignore[attr-defined]
        value = getattr(module, attribute)
        public = [getattr(home, attribute) for home in homes if attribute in home.__all__]
        if public:
            assert all(value is other for other in public), attribute
    with warnings.catch_warnings(record=True) as again:  # once: the module is imported
        warnings.simplefilter("always")
        importlib.import_module(name)
    assert again == []


def test_the_documented_old_imports_still_resolve() -> None:
    with pytest.warns(DeprecationWarning, match=r"lionexec\.journal\.postgres") as caught:
        sys.modules.pop("lionexec.journal.postgres", None)
        from lionexec.journal.postgres import PostgresJournal
    assert PostgresJournal is journal.PostgresJournal
    assert caught[0].filename == __file__  # (the line that imports the old path)
    with pytest.warns(DeprecationWarning, match=r"lionexec\.journal\.jsonl"):
        sys.modules.pop("lionexec.journal.jsonl", None)
        from lionexec.journal.jsonl import call_records
    assert call_records is journal.call_records
    with pytest.warns(DeprecationWarning, match=r"lionexec\.journal\.worker\b"):
        sys.modules.pop("lionexec.journal.worker", None)
        from lionexec.journal.worker import Worker
    assert Worker is workers.Worker
    with pytest.warns(DeprecationWarning, match=r"lionexec\.journal\.backend\b"):
        sys.modules.pop("lionexec.journal.backend", None)
        from lionexec.journal.backend import Backend, MemoryBackend
    assert (Backend, MemoryBackend) == (backends.Backend, backends.MemoryBackend)
