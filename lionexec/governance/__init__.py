"""The governance layer: the call context, hook bus, session gates and permission policy,
and the seams bound for a caller that runs many calls through them (:class:`BoundSeams`).

The permission policy reads each call's subject by its kind; how a kind is read is the
extension point :mod:`lionexec.governance.subjects` (:class:`SubjectReader`,
:func:`register_subject_kind`), whose names are exported here too.
"""

from .._public import publish as _publish
from ._context import CallContext as CallContext
from ._context import ToolInvocation as ToolInvocation
from ._context import frozen_arguments as frozen_arguments
from ._gates import Gate as Gate
from ._gates import GateDenied as GateDenied
from ._gates import SessionObserver as SessionObserver
from ._gates import SessionObserverStatistics as SessionObserverStatistics
from ._gates import SubscriberFailure as SubscriberFailure
from ._hooks import MAX_KEPT_FAILURES as MAX_KEPT_FAILURES
from ._hooks import HookBus as HookBus
from ._hooks import HookBusStatistics as HookBusStatistics
from ._hooks import HookFailure as HookFailure
from ._hooks import HookHandler as HookHandler
from ._hooks import HookPoint as HookPoint
from ._hooks import PreHookResult as PreHookResult
from ._hooks import StopHook as StopHook
from ._policy import AwaitingApproval as AwaitingApproval
from ._policy import Behavior as Behavior
from ._policy import EscalationHandler as EscalationHandler
from ._policy import PermissionDecision as PermissionDecision
from ._policy import PermissionMode as PermissionMode
from ._policy import PermissionPolicy as PermissionPolicy
from ._policy import Rules as Rules
from ._seams import BoundSeams as BoundSeams
from .subjects import IGNORE_CASE as IGNORE_CASE
from .subjects import SHELL_CONTROL as SHELL_CONTROL
from .subjects import Objection as Objection
from .subjects import ReadSubject as ReadSubject
from .subjects import SubjectKind as SubjectKind
from .subjects import SubjectReader as SubjectReader
from .subjects import ignoring_case as ignoring_case
from .subjects import register_subject_kind as register_subject_kind
from .subjects import subject_kind_of as subject_kind_of
from .subjects import subject_kinds as subject_kinds

__all__ = [
    "IGNORE_CASE",
    "MAX_KEPT_FAILURES",
    "SHELL_CONTROL",
    "AwaitingApproval",
    "Behavior",
    "BoundSeams",
    "CallContext",
    "EscalationHandler",
    "Gate",
    "GateDenied",
    "HookBus",
    "HookBusStatistics",
    "HookFailure",
    "HookHandler",
    "HookPoint",
    "Objection",
    "PermissionDecision",
    "PermissionMode",
    "PermissionPolicy",
    "PreHookResult",
    "Rules",
    "SessionObserver",
    "SessionObserverStatistics",
    "StopHook",
    "SubjectKind",
    "SubscriberFailure",
    "ToolInvocation",
    "frozen_arguments",
    "ignoring_case",
    "register_subject_kind",
    "subject_kind_of",
    "subject_kinds",
]

# The subject readers' public names live in lionexec.governance too (the subjects package
# groups them; this package is their documented home).
_publish(
    __name__,
    globals(),
    include=("lionexec.governance.subjects.base", "lionexec.governance.subjects._inference"),
)
