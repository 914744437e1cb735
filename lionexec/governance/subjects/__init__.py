"""Subject readers: how a permission policy reads the subject of a call, one reader per kind.

A :class:`~lionexec.governance.PermissionPolicy` matches its rules against a call's
*subject*, read according to the subject's kind (:func:`subject_kind_of`): the built-in
kinds are ``"path"``, ``"command"`` and ``"text"``; :func:`register_subject_kind` adds a kind
with its own :class:`SubjectReader`. The names here are also exported from
:mod:`lionexec.governance`, their documented home.
"""

from ._command import read_command as _read_command
from ._inference import subject_kind_of as subject_kind_of
from ._path import read_path as _read_path
from ._text import SHELL_CONTROL as SHELL_CONTROL
from ._text import read_text as _read_text
from .base import IGNORE_CASE as IGNORE_CASE
from .base import Objection as Objection
from .base import ReadSubject as ReadSubject
from .base import SubjectKind as SubjectKind
from .base import SubjectReader as SubjectReader
from .base import ignoring_case as ignoring_case
from .base import register_subject_kind as register_subject_kind
from .base import subject_kinds as subject_kinds

__all__ = [
    "IGNORE_CASE",
    "SHELL_CONTROL",
    "Objection",
    "SubjectKind",
    "ignoring_case",
    "register_subject_kind",
    "subject_kind_of",
    "subject_kinds",
]

# The built-in kinds, in the order error messages list them.
register_subject_kind("path", _read_path)
register_subject_kind("command", _read_command)
register_subject_kind("text", _read_text)
