"""Command tools confined by the operating system: bubblewrap, not matching shell text.

:func:`command_tool` builds a :class:`~lionexec.tools.Tool` that runs the argv a model gives
(no shell unless asked) under a :class:`Profile`: a read-only file system but for the
directories the tool declares, a private ``/tmp``, no network unless granted, an environment
reduced to an allowlist, resource limits, capped output, a timeout, and every process of the
command killed when the call is cancelled. :func:`run_command` runs one argv the same way and
returns a :class:`SandboxResult`. See :doc:`/sandbox` for the defaults and what they do not cover.

Where bubblewrap is missing, or the kernel refuses the user namespaces it needs, a run raises
:class:`SandboxUnavailableError` and nothing runs; running unconfined takes
``Profile(confinement="none")``, named on purpose, logged and recorded with each run.

Imports only :mod:`lionexec.tools` and :mod:`lionexec.errors`. Linux only (bubblewrap).
"""

from .._public import publish as _publish
from ._profile import CONFINEMENTS as CONFINEMENTS
from ._profile import DEFAULT_ENV as DEFAULT_ENV
from ._profile import DEFAULT_PROTECTED as DEFAULT_PROTECTED
from ._profile import CommandFailedError as CommandFailedError
from ._profile import Confinement as Confinement
from ._profile import Profile as Profile
from ._profile import SandboxUnavailableError as SandboxUnavailableError
from ._run import SandboxResult as SandboxResult
from ._run import run_command as run_command
from ._tool import command_tool as command_tool

__all__ = [
    "CONFINEMENTS",
    "DEFAULT_ENV",
    "DEFAULT_PROTECTED",
    "CommandFailedError",
    "Confinement",
    "Profile",
    "SandboxResult",
    "SandboxUnavailableError",
    "command_tool",
    "run_command",
]

_publish(__name__, globals())
