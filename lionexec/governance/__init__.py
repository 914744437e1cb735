"""The governance layer: the call context, hook bus, session gates and permission policy."""

from .context import CallContext, ToolInvocation, frozen_arguments
from .gates import Gate, GateDenied, SessionObserver, SubscriberFailure
from .hooks import (
    MAX_KEPT_FAILURES,
    HookBus,
    HookFailure,
    HookHandler,
    HookPoint,
    PreHookResult,
    StopHook,
)
from .permissions import (
    SHELL_CONTROL,
    Behavior,
    EscalationHandler,
    PermissionDecision,
    PermissionMode,
    PermissionPolicy,
    Rules,
)

__all__ = [
    "MAX_KEPT_FAILURES",
    "SHELL_CONTROL",
    "Behavior",
    "CallContext",
    "EscalationHandler",
    "Gate",
    "GateDenied",
    "HookBus",
    "HookFailure",
    "HookHandler",
    "HookPoint",
    "PermissionDecision",
    "PermissionMode",
    "PermissionPolicy",
    "PreHookResult",
    "Rules",
    "SessionObserver",
    "StopHook",
    "SubscriberFailure",
    "ToolInvocation",
    "frozen_arguments",
]
