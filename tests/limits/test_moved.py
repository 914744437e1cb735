"""The limits have one home, :mod:`lionexec.limits`; the old paths still work for one release,
with a ``DeprecationWarning`` naming the new one, and give the very same objects."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

import lionexec.journal
import lionexec.limits
import lionexec.models
from lionexec.errors import LionexecError
from lionexec.limits import (
    BudgetExceededError,
    Limit,
    Limiter,
    LimitState,
    LocalLimiter,
    StateInMemory,
)

OLD_MODULES = {
    "lionexec.journal.limits": [
        "NEVER",
        "Busy",
        "Deferred",
        "Denied",
        "Granted",
        "Limit",
        "LimitDeniedError",
        "LimitState",
        "LocalLimiter",
        "RateBucket",
        "Spend",
        "StateInMemory",
        "Verdict",
        "give_back",
        "judge",
        "keys_for",
        "limits_by_key",
        "refund",
    ],
    "lionexec.models.limiter": [
        "BudgetExceededError",
        "RateLimiter",
        "RateLimiterStatistics",
        "parse_duration",
        "retry_after_seconds",
    ],
}


@pytest.mark.parametrize("old", sorted(OLD_MODULES))
def test_an_old_module_warns_once_on_import_and_gives_the_same_objects(old: str) -> None:
    parent, _, leaf = old.rpartition(".")
    sys.modules.pop(old, None)
    if hasattr(sys.modules[parent], leaf):
        delattr(sys.modules[parent], leaf)
    with pytest.warns(DeprecationWarning, match=r"lionexec\.limits") as caught:
        __import__(old)  # as an import statement does (importlib.import_module adds a frame)
    module = sys.modules[old]
    assert [str(w.message) for w in caught] == [
        f"{old} is deprecated; import from lionexec.limits instead"
    ]
    assert caught[0].filename == __file__  # it points at the importer (stacklevel=2)
    for name in OLD_MODULES[old]:
        assert getattr(module, name) is getattr(lionexec.limits, name), name
    importlib.import_module(old)  # once: imported again, it says nothing (warnings are errors)


@pytest.mark.parametrize(
    ("package", "name"),
    [
        (lionexec.journal, "Limit"),
        (lionexec.journal, "LimitDeniedError"),
        (lionexec.journal, "LocalLimiter"),
        (lionexec.models, "BudgetExceededError"),
        (lionexec.models, "RateLimiter"),
        (lionexec.models, "RateLimiterStatistics"),
    ],
)
def test_a_name_that_left_a_package_is_still_there_with_a_warning(
    package: types.ModuleType, name: str
) -> None:
    assert name not in package.__all__
    with pytest.warns(DeprecationWarning, match=r"import it from lionexec\.limits") as caught:
        found = getattr(package, name)
    assert found is getattr(lionexec.limits, name)
    assert caught[0].filename == __file__
    with pytest.raises(AttributeError):
        _ = package.NoSuchName  # unknown names are still unknown, without a warning


def test_the_protocols_are_met_by_the_in_process_pieces() -> None:
    assert isinstance(LocalLimiter({"t": Limit(rate=1)}), Limiter)
    assert isinstance(StateInMemory(), LimitState)
    assert not isinstance(object(), Limiter)


def test_budget_exceeded_is_a_lionexec_value_error() -> None:
    assert issubclass(BudgetExceededError, LionexecError)
    assert issubclass(BudgetExceededError, ValueError)
    assert BudgetExceededError.__module__ == "lionexec.limits"
