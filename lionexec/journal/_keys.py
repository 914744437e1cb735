"""How a journal writes the values it compares: arguments, keys, digests, branch ids."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from lionexec._jsonable import is_flat_json, json_encoder, jsonable, utf8_text
from lionexec.governance import PermissionDecision, PermissionPolicy
from lionexec.tools import Tool

from .errors import JournalError

__all__ = [
    "MAX_KEY_BYTES",
    "branch_uuid",
    "canonical_json",
    "cut",
    "digest",
    "policy_digest",
    "storable_key",
]

#: The longest idempotency key a journal keeps, in bytes of UTF-8: PostgreSQL indexes at most
#: about 2.7 kB of one, and every backend keeps the same keys.
MAX_KEY_BYTES = 2048


def storable_key(key: str, call_id: str, function: str) -> str:
    """*key* (a call's idempotency key) as the journal stores it: UTF-8 (a lone surrogate
    becomes U+FFFD). Raises :class:`~lionexec.journal.JournalError` naming the call if no
    backend could keep it (longer than :data:`MAX_KEY_BYTES`, or holding a NUL character):
    checked before the key joins a group commit, whose other calls a key refused by the
    database would fail too."""
    key = utf8_text(key)
    # (at most 4 bytes a character: most keys need no encoding to be measured)
    size = len(key.encode()) if len(key) > MAX_KEY_BYTES // 4 else 0
    if size > MAX_KEY_BYTES or "\x00" in key:
        why = f"is {size} bytes long (UTF-8)" if size > MAX_KEY_BYTES else "holds a NUL character"
        raise JournalError(
            f"the idempotency key {cut(repr(key), 80)} of call {cut(repr(call_id), 80)} "
            f"(tool {function!r}) {why}: a journal keeps keys of at most {MAX_KEY_BYTES} bytes "
            "without NUL characters (derive a shorter key, a digest say); the tool did not run"
        )
    return key


def canonical_json(value: Any) -> str:
    """*value* as compact, key-sorted strict JSON (how arguments are stored and compared)."""
    # (a flat dict of plain values is its own rendering: no converted copy)
    if type(value) is dict and is_flat_json(value):
        return _canonical(value)
    return _canonical(jsonable(value))


_canonical = json_encoder(sort_keys=True)


def digest(text: str) -> str:
    """The SHA-256 of *text* (UTF-8), in hex."""
    return hashlib.sha256(text.encode()).hexdigest()


def policy_digest(
    policy: PermissionPolicy, decision: PermissionDecision, tool: Tool | None = None
) -> str:
    """The identity of the policy that asked about a call: its rules, the tool, the rule, and
    the tool's :attr:`~lionexec.tools.Tool.approval_binding` (a sandbox profile's digest, say)
    when it has one."""
    identity: dict[str, Any] = {
        "policy": policy.to_dict(),
        "tool": decision.tool_name,
        "rule": decision.matched_rule,
    }
    binding = None if tool is None else tool.approval_binding
    if binding is not None:  # absent otherwise: approvals stored before bindings still match
        identity["binding"] = binding
    return digest(canonical_json(identity))


def cut(text: str, limit: int = 200) -> str:
    """*text* shortened to *limit* characters (its end replaced by an ellipsis)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def branch_uuid(branch_id: uuid.UUID | str | None) -> uuid.UUID:
    """*branch_id* as a UUID (a new one for ``None``); raises ``ValueError`` for another
    string."""
    if branch_id is None:
        return uuid.uuid4()
    if isinstance(branch_id, uuid.UUID):
        return branch_id
    try:
        return uuid.UUID(str(branch_id))
    except ValueError:
        raise ValueError(f"a branch id is a UUID, not {branch_id!r}") from None


def stored_json(text: str, what: str) -> Any:
    """*text*, a JSON record the journal stored, read back; *what* names it in the error.

    Raises:
        JournalError: the text is not JSON (the journal was damaged outside lionexec).
    """
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:  # JSONDecodeError, a NUL, a non-string
        raise JournalError(
            f"the journal's {what} is not valid JSON ({exc}): the journal was changed or "
            "damaged outside lionexec"
        ) from None
