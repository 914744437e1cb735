"""The governance layer: the call context, hook bus, session gates and permission policy,
and the seams bound for a caller that runs many calls through them (:class:`BoundSeams`)."""

from .._public import publish as _publish
from ._seams import BoundSeams as BoundSeams
from .context import CallContext as CallContext
from .context import ToolInvocation as ToolInvocation
from .context import frozen_arguments as frozen_arguments
from .gates import Gate as Gate
from .gates import GateDenied as GateDenied
from .gates import SessionObserver as SessionObserver
from .gates import SessionObserverStatistics as SessionObserverStatistics
from .gates import SubscriberFailure as SubscriberFailure
from .hooks import MAX_KEPT_FAILURES as MAX_KEPT_FAILURES
from .hooks import HookBus as HookBus
from .hooks import HookBusStatistics as HookBusStatistics
from .hooks import HookFailure as HookFailure
from .hooks import HookHandler as HookHandler
from .hooks import HookPoint as HookPoint
from .hooks import PreHookResult as PreHookResult
from .hooks import StopHook as StopHook
from .permissions import IGNORE_CASE as IGNORE_CASE
from .permissions import SHELL_CONTROL as SHELL_CONTROL
from .permissions import AwaitingApproval as AwaitingApproval
from .permissions import Behavior as Behavior
from .permissions import EscalationHandler as EscalationHandler
from .permissions import PermissionDecision as PermissionDecision
from .permissions import PermissionMode as PermissionMode
from .permissions import PermissionPolicy as PermissionPolicy
from .permissions import Rules as Rules
from .permissions import SubjectKind as SubjectKind
from .permissions import ignoring_case as ignoring_case
from .permissions import subject_kind_of as subject_kind_of

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
    "subject_kind_of",
]

_publish(__name__, globals())
