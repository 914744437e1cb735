"""A missing extra, named: the error a module raises when a package of one of lionexec's
extras is not installed, saying which extra to install (``pip install 'lionexec[http]'``)."""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(exc: ModuleNotFoundError, extra: str, needed_by: str) -> ModuleNotFoundError:
    """A :class:`ModuleNotFoundError` for *exc* (a failed import) naming *extra*: raise it
    ``from exc``. *needed_by* says what needs it (``"lionexec.models"``)."""
    missing = exc.name or "a package"
    return ModuleNotFoundError(
        f"{needed_by} needs the {extra} extra ({missing} is not installed): "
        f"pip install 'lionexec[{extra}]'",
        name=exc.name,
    )
