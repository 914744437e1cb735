"""Deprecated: this module moved to :mod:`lionexec.act` (import its names from there).

Kept for one release: importing it warns once (``DeprecationWarning``) and gives the same
objects. ``lionexec.act.alcall`` itself stays the function :func:`lionexec.act.alcall`: the
package is kept from rebinding that name to this module when it is imported.
"""

import sys
import types
import warnings
from typing import Any

from ._alcall import DEFAULT_PARAMS as DEFAULT_PARAMS
from ._alcall import AlcallParams as AlcallParams
from ._alcall import alcall as alcall

__all__ = ["DEFAULT_PARAMS", "AlcallParams", "alcall"]


class _KeepsAlcall(types.ModuleType):
    """:mod:`lionexec.act`, whose ``alcall`` stays the function when the import system,
    having loaded this module, sets the package's attribute of the same name to it."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "alcall" and value is sys.modules.get(__name__):
            return
        super().__setattr__(name, value)


_package = sys.modules[__name__.rpartition(".")[0]]
if type(_package) is types.ModuleType:
    _package.__class__ = _KeepsAlcall

warnings.warn(
    "lionexec.act.alcall is deprecated as a module: import alcall, AlcallParams and "
    "DEFAULT_PARAMS from lionexec.act",
    DeprecationWarning,
    stacklevel=2,
)
