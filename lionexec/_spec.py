"""``MODULE:ATTRIBUTE`` specs, as the command line names the tools a worker or server runs."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["load_attribute"]


def load_attribute(spec: str) -> Any:
    """The object *spec* (``MODULE:ATTRIBUTE``, the attribute possibly dotted) names.

    Raises:
        ValueError: *spec* is not of that form.
        ImportError: the module is missing, or importing it failed (the cause is chained).
        AttributeError: the module has no such attribute.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(
            "expected MODULE:ATTRIBUTE (a module, a colon, the name of one of its attributes: "
            "myapp.tools:TOOLS)"
        )
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError:
        raise
    except Exception as exc:  # the module itself failed (a SyntaxError, an error it raised)
        raise ImportError(f"importing {module_name} failed: {exc!r}") from exc
    for part in attribute.split("."):
        value = getattr(value, part)
    return value
