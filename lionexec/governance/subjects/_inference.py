"""Which kind a tool's subject is: declared by the tool, or inferred from its subject
parameter (annotation and name) and the tool's name."""

from __future__ import annotations

import functools
import inspect
import pathlib
import re
import types
import typing
import weakref
from typing import TYPE_CHECKING, Any, Final

import attrs

from .base import SubjectKind

if TYPE_CHECKING:
    from ...tools import Tool

__all__ = ["subject_kind_of"]

#: Without a declared kind: parameters that hold a path ... (names as :func:`_plain_name`
#: spells them: ``filePath``, ``file_path`` and ``FILE-PATH`` are ``filepath``)
_PATH_PARAMETERS: Final = frozenset(
    {"path", "file", "filename", "filepath", "dir", "dirpath", "directory", "directorypath"}
    | {"folder", "folderpath"}
)
#: ... parameters that hold a command ...
_COMMAND_PARAMETERS: Final = frozenset({"command", "cmd", "commandline", "cmdline"})
#: ... and tools whose subject is a command whatever the parameter is called.
_COMMAND_TOOLS: Final = frozenset({"bash", "sh", "shell", "zsh"})


def _plain_name(name: str) -> str:
    """*name* case folded, without ``_`` and ``-``: how a parameter or tool name is compared
    with the names above."""
    return name.casefold().replace("_", "").replace("-", "")


_KINDS: weakref.WeakKeyDictionary[Tool, SubjectKind] = weakref.WeakKeyDictionary()


def subject_kind_of(tool: Tool | None) -> SubjectKind | str:
    """How a policy reads the subject of *tool*'s calls.

    1. The kind the tool declares (``Tool(..., subject_kind=...)``).
    2. No tool, or no subject argument (the subject is then the tool name): ``"text"``.
    3. A subject parameter annotated :class:`pathlib.PurePath` or a subclass (``Path``,
       ``Path | None``, ``Annotated[Path, ...]``): ``"path"``.
    4. A subject parameter named ``command``, ``cmd``, ``command_line`` or ``cmdline``, or
       a tool named ``bash``, ``sh``, ``shell`` or ``zsh``: ``"command"``.
    5. A subject parameter named ``path``, ``file``, ``filename``, ``filepath``, ``dir``,
       ``dirpath``, ``directory``, ``directory_path``, ``folder`` or ``folder_path``:
       ``"path"``.
    6. Otherwise ``"text"``.

    Names compare ignoring case, ``_`` and ``-``: ``filePath``, ``FILE_PATH`` and
    ``file-path`` are ``filepath``, ``Command`` is ``command``, a tool ``Bash`` is ``bash``.

    Declare the kind when in doubt: inference exists so that tools written before kinds
    existed keep their meaning, and so that the common names are read the safe way.
    """
    if tool is None or tool.subject is None:
        return "text"
    declared = tool.subject_kind
    if declared is not None:
        return declared
    try:
        return _KINDS[tool]
    except KeyError:
        pass
    kind: SubjectKind
    if _is_path_annotation(_subject_annotation(tool, tool.subject)):
        kind = "path"
    elif (
        _plain_name(tool.subject) in _COMMAND_PARAMETERS
        or _plain_name(tool.name) in _COMMAND_TOOLS
    ):
        kind = "command"
    elif _plain_name(tool.subject) in _PATH_PARAMETERS:
        kind = "path"
    else:
        kind = "text"
    _KINDS[tool] = kind
    return kind


def _kind_for_name(tool_name: str) -> SubjectKind:
    return "command" if _plain_name(tool_name) in _COMMAND_TOOLS else "text"


def _subject_annotation(tool: Tool, name: str) -> object:
    """The annotation of *tool*'s parameter *name*, resolved where possible."""
    target: Any = tool.request_class
    field = name
    if target is not None:
        if attrs.has(target):
            for a in attrs.fields(target):
                if (a.alias or a.name) == name:
                    field = a.name
    else:
        target = tool.func_callable
        while isinstance(target, functools.partial):
            target = target.func
        if isinstance(target, type):
            target = target.__init__  # type: ignore[misc]
        elif not (inspect.isfunction(target) or inspect.ismethod(target)):
            target = type(target).__call__
    try:
        return typing.get_type_hints(target, include_extras=True).get(field)
    except Exception:  # unresolvable string annotations: read them as written
        try:
            parameter = inspect.signature(tool.func_callable).parameters.get(name)
        except (TypeError, ValueError):
            return None
        return None if parameter is None else parameter.annotation


_PATH_WORD: Final = re.compile(r"\b(?:Pure(?:Posix|Windows)?Path|PosixPath|Path)\b")


def _is_path_annotation(annotation: object) -> bool:
    if isinstance(annotation, str):
        return _PATH_WORD.search(annotation) is not None
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_path_annotation(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return any(_is_path_annotation(arg) for arg in typing.get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, pathlib.PurePath)
