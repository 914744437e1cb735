"""Run Python as if an extra were not installed: a meta path finder refuses its packages.

``blocking("psycopg", "lionexec.__main__")`` is the source for ``python -c``: it makes every
import of ``psycopg`` (and its submodules; a dotted name, ``opentelemetry.sdk``, blocks that
package only) fail as a missing package does
(``ModuleNotFoundError`` with ``name`` set), then runs the module as ``python -m`` would,
with the rest of the command line as its arguments. A script path (``examples/agent.py``)
runs as ``python PATH`` would.
"""

from __future__ import annotations

TEMPLATE = """
import importlib.abc, runpy, sys

BLOCKED = {blocked!r}


def blocked(name):
    return any(name == b or name.startswith(b + ".") for b in BLOCKED)


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if blocked(name):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Blocker())
for name in list(sys.modules):
    if blocked(name):
        del sys.modules[name]
target = {target!r}
sys.argv = [target, *sys.argv[1:]]
if target.endswith(".py"):
    runpy.run_path(target, run_name="__main__")
else:
    runpy.run_module(target, run_name="__main__", alter_sys=True)
"""


def blocking(blocked: str | tuple[str, ...], target: str) -> str:
    """``python -c`` source running *target* (a module or a ``.py`` path) with the packages
    *blocked* (and their submodules) unimportable."""
    names = (blocked,) if isinstance(blocked, str) else blocked
    return TEMPLATE.format(blocked=tuple(names), target=target)
