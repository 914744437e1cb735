"""What the seams of an announced call are shown: copies and text summaries, never the record.

Hooks, the session observer and message callbacks run after a call is recorded (the act
transaction's announce phase). Each gets a copy of what was recorded (or a text summary, cut
to a bound), so that nothing it does can change or split the record.
"""

from __future__ import annotations

import copy
from typing import TypeVar

from lionexec._slots import shallow_copy
from lionexec._snapshot import snapshot
from lionexec.conversation import ActionRequest, ActionResponse, ActionResponseContent
from lionexec.tools import FunctionCalling

__all__ = [
    "SUMMARY_LIMIT",
    "VERBOSE_LIMIT",
    "copy_error",
    "detached",
    "detached_message",
    "summarize",
]

_M = TypeVar("_M", ActionRequest, ActionResponse)
_E = TypeVar("_E")

#: Hook argument and result summaries are cut to this many characters.
SUMMARY_LIMIT = 200
#: ``verbose_action`` log previews are cut to this many characters.
VERBOSE_LIMIT = 50


def summarize(value: object, limit: int = SUMMARY_LIMIT) -> str:
    """``str(value)`` cut to *limit* characters; never raises."""
    try:
        text = str(value)
    except Exception:
        text = f"<unprintable {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def copy_error(error: _E) -> _E:
    """A copy of a recorded exception for a hook or an observer: its own ``args``,
    attributes and notes, each a private copy (``copy.copy`` alone shares the ``__notes__``
    list and every mutable attribute, such as a ``details`` dict), the chain and traceback as
    they are. An exception that :func:`copy.copy` cannot copy (its copy raises, or is not an
    exception) is rebuilt without its ``__init__`` (same class, private copies of its
    ``args`` and attributes); one that cannot be rebuilt either is stood in for by a
    :class:`RuntimeError` naming it: never the recorded exception itself."""
    if not isinstance(error, BaseException):
        return error
    try:
        copied = copy.copy(error)
        if not isinstance(copied, BaseException):  # a __copy__ or __reduce__ of its own
            raise TypeError("not an exception")
        return _detach(error, copied)  # type: ignore[return-value]
    except Exception:
        pass
    try:  # rebuilt: BaseException.__new__ sets args and runs no __init__ of the class
        rebuilt = BaseException.__new__(type(error), *error.args)
        attributes = getattr(error, "__dict__", None)
        if type(attributes) is dict:
            rebuilt.__dict__.update(attributes)
        return _detach(error, rebuilt)  # type: ignore[return-value]
    except Exception:
        stand_in = RuntimeError(f"{type(error).__name__}: {summarize(error)}")
        stand_in.__cause__, stand_in.__traceback__ = error.__cause__, error.__traceback__
        return stand_in  # type: ignore[return-value]


def _detach(error: BaseException, copied: BaseException) -> BaseException:
    """*copied* (a shallow copy of *error*) given private copies of what it shares."""
    copied.args = snapshot(error.args)
    attributes = getattr(copied, "__dict__", None)
    if type(attributes) is dict:
        for name, value in attributes.items():
            if name != "__notes__":
                attributes[name] = snapshot(value)
    notes = getattr(error, "__notes__", None)
    if type(notes) is list:
        copied.__notes__ = list(notes)
    copied.__cause__, copied.__context__ = error.__cause__, error.__context__
    copied.__suppress_context__ = error.__suppress_context__
    copied.__traceback__ = error.__traceback__
    return copied


def detached(event: FunctionCalling) -> FunctionCalling:
    """A copy of *event* for observers: changing it changes nothing recorded."""
    clone = shallow_copy(event)
    clone.execution = execution = shallow_copy(event.execution)
    execution.response = snapshot(execution.response)
    execution.error = copy_error(execution.error)  # not the recorded exception itself
    clone.arguments = snapshot(event.arguments)  # FunctionCalling converts nothing on setattr
    clone.metadata = snapshot(event.metadata)  # logged with the event: not shared either
    return clone


def detached_message(message: _M) -> _M:
    """A copy of a recorded message for callbacks and hooks: equal to it, sharing nothing
    mutable (its content is copied, arguments and output snapshotted). About a seventh of
    ``copy.deepcopy``'s cost, paid for both messages of every call a ``message.add`` hook or
    a message callback is shown."""
    clone = shallow_copy(message)
    content = shallow_copy(message.content)
    object.__setattr__(content, "arguments", snapshot(content.arguments))
    if isinstance(content, ActionResponseContent):
        object.__setattr__(content, "output", snapshot(content.output))
    object.__setattr__(clone, "content", content)
    return clone
