"""Make the names a package exports say that they live there (as trio does for its own).

Each public package (``lionexec``, ``lionexec.engine``, ...) ends its ``__init__`` with
``publish(__name__, globals())``: every class and function in its ``__all__`` that lionexec
defines in a private module then reports the package as its ``__module__``, so reprs,
tracebacks, pickles and the API docs show ``lionexec.engine.Event``, the name users import,
rather than ``lionexec.engine._event.Event``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from typing import Any

__all__ = ["publish"]

#: Modules users import names from; a name already homed in one keeps its home. Each
#: package that calls :func:`publish` joins them.
_PUBLIC_MODULES: set[str] = {"lionexec.errors", "lionexec.serialization", "lionexec.testing"}


def publish(package: str, namespace: Mapping[str, Any], *, include: tuple[str, ...] = ()) -> None:
    """Re-home the classes and functions in ``namespace["__all__"]`` to *package*.

    Only objects defined in a module directly inside *package* (``lionexec.engine._event``
    for ``lionexec.engine``, ``lionexec._failures`` for ``lionexec``) are touched; names
    whose home is a public module (such as :mod:`lionexec.errors`) keep it, and so do names
    a subpackage exports (that subpackage publishes them itself). A module that is itself
    the public home of names from a private module (as :mod:`lionexec.serialization` is for
    :mod:`lionexec._jsonable`) names that module in *include*. A class's own string
    annotations are evaluated first, in the module that defined them, so
    ``typing.get_type_hints`` (and cattrs, which relies on it) still resolves them once the
    class names another module. Annotations that cannot be evaluated there (names imported
    only for type checking) are left as they are.
    """
    _PUBLIC_MODULES.add(package)
    for name in namespace["__all__"]:
        obj = namespace.get(name)  # None for a lazy module attribute (PEP 562)
        if not isinstance(obj, type | types.FunctionType):
            continue
        home = getattr(obj, "__module__", "")
        if (
            (home.rpartition(".")[0] != package and home not in include)
            or home in _PUBLIC_MODULES
            or getattr(obj, "__name__", None) != name
        ):
            continue
        if isinstance(obj, type):
            _resolve_own_annotations(obj)
        obj.__module__ = package


def _resolve_own_annotations(cls: type) -> None:
    # The class's own dict, to update in place (inspect.get_annotations returns a copy).
    annotations = cls.__dict__.get("__annotations__")  # noqa: RUF063
    if not isinstance(annotations, dict):
        return
    module = sys.modules.get(cls.__module__)
    if module is None:
        return
    globalns = vars(module)
    localns = dict(vars(cls))
    for key, value in list(annotations.items()):
        if not isinstance(value, str):
            continue
        try:
            annotations[key] = eval(value, globalns, localns)
        except Exception:
            continue
