"""The public surface, pinned: every public namespace and the names it exports.

``tests/public_names.txt`` lists them; a change to the surface (a name added, removed or
moved) fails here until that file is updated in the same change, so the change shows in its
diff. To update it after a deliberate change::

    python tests/test_public_names.py > tests/public_names.txt
"""

from __future__ import annotations

import importlib
import pathlib
import pkgutil
import sys

import lionexec

PINNED = pathlib.Path(__file__).with_name("public_names.txt")


def public_namespaces() -> list[str]:
    """``lionexec`` and every module of it whose dotted name has no ``_``-prefixed part and
    that declares ``__all__``, deprecated shims left out (they warn on import)."""
    names = ["lionexec"]
    for info in pkgutil.walk_packages(lionexec.__path__, "lionexec.", onerror=lambda _: None):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        names.append(info.name)
    found = []
    for name in sorted(names):
        if name in _deprecated():
            continue
        module = importlib.import_module(name)
        if hasattr(module, "__all__"):
            found.append(name)
    return found


def _deprecated() -> set[str]:
    """Old module paths kept for one release: each says so in its first docstring line."""
    shims = set()
    root = pathlib.Path(lionexec.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if text.startswith('"""Deprecated'):
            relative = path.relative_to(root.parent).with_suffix("")
            parts = list(relative.parts)
            if parts[-1] == "__init__":
                parts.pop()
            shims.add(".".join(parts))
    return shims


def surface() -> str:
    lines = []
    for name in public_namespaces():
        module = importlib.import_module(name)
        lines.append(f"[{name}]")
        lines.extend(f"  {export}" for export in sorted(module.__all__))
    return "\n".join(lines) + "\n"


def test_the_public_surface_is_the_pinned_one() -> None:
    now = surface()
    pinned = PINNED.read_text(encoding="utf-8")
    if now != pinned:
        import difflib

        diff = "".join(
            difflib.unified_diff(
                pinned.splitlines(keepends=True),
                now.splitlines(keepends=True),
                "tests/public_names.txt",
                "the package now",
            )
        )
        raise AssertionError(
            "the public surface changed; if that is deliberate, update the pin with\n"
            "    python tests/test_public_names.py > tests/public_names.txt\n" + diff
        )


if __name__ == "__main__":
    sys.stdout.write(surface())
