"""Deprecated: import these names from :mod:`lionexec.governance`.

The permission policy moved to ``lionexec.governance._policy`` and the subject kinds (with
``subject_kind_of``, ``ignoring_case``, ``IGNORE_CASE`` and ``SHELL_CONTROL``) to
:mod:`lionexec.governance.subjects`; :mod:`lionexec.governance` exports them all. This
module re-exports the names it had, for one release.
"""

import warnings

from ._policy import AwaitingApproval as AwaitingApproval
from ._policy import Behavior as Behavior
from ._policy import EscalationHandler as EscalationHandler
from ._policy import PermissionDecision as PermissionDecision
from ._policy import PermissionMode as PermissionMode
from ._policy import PermissionPolicy as PermissionPolicy
from ._policy import Rules as Rules
from .subjects import IGNORE_CASE as IGNORE_CASE
from .subjects import SHELL_CONTROL as SHELL_CONTROL
from .subjects import SubjectKind as SubjectKind
from .subjects import ignoring_case as ignoring_case
from .subjects import subject_kind_of as subject_kind_of

__all__ = [
    "IGNORE_CASE",
    "SHELL_CONTROL",
    "AwaitingApproval",
    "Behavior",
    "EscalationHandler",
    "PermissionDecision",
    "PermissionMode",
    "PermissionPolicy",
    "Rules",
    "SubjectKind",
    "ignoring_case",
    "subject_kind_of",
]

warnings.warn(
    "lionexec.governance.permissions is deprecated: import its names from "
    "lionexec.governance (the subject kinds are in lionexec.governance.subjects)",
    DeprecationWarning,
    stacklevel=2,
)
