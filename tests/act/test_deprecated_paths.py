"""The act layer's old module paths still work for one release, and say where the names went.

``lionexec.act.envelope``, ``lionexec.act.alcall`` and ``lionexec.act.evidence`` were modules
users imported from; their names now come from :mod:`lionexec.act`. Each old path warns
(``DeprecationWarning``) once, on import, and gives the very objects the package exports.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import warnings
from typing import Any

import pytest

import lionexec
import lionexec.act
from lionexec.act import _evidence

OLD_PATHS = {
    "lionexec.act.envelope": (
        "MAX_ARGUMENT_CHARS",
        "MAX_ARGUMENT_DEPTH",
        "MAX_CALL_ID_CHARS",
        "Proposal",
        "ProposedBatch",
        "read_batch",
        "read_proposal",
    ),
    "lionexec.act.alcall": ("DEFAULT_PARAMS", "AlcallParams", "alcall"),
    "lionexec.act.evidence": (
        "DEFAULT_SINK_CAPACITY",
        "EvidenceRecord",
        "EvidenceSink",
        "SinkStatistics",
        "WriteAhead",
        "WriteAheadReply",
    ),
}


def import_fresh(path: str) -> Any:
    sys.modules.pop(path, None)
    with pytest.warns(DeprecationWarning, match=f"{path} is deprecated") as caught:
        module = importlib.import_module(path)
    assert len(caught) == 1
    return module


@pytest.mark.parametrize("path", sorted(OLD_PATHS))
def test_an_old_path_warns_once_and_gives_the_same_objects(path: str) -> None:
    module = import_fresh(path)
    for name in OLD_PATHS[path]:
        assert getattr(module, name) is getattr(lionexec.act, name), name
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(path) is module  # imported: no second warning


def test_the_old_evidence_path_still_gives_its_machinery() -> None:
    module = import_fresh("lionexec.act.evidence")
    assert module.SinkFeed is _evidence.SinkFeed
    assert module.Evidence is _evidence.Evidence


def test_importing_the_old_alcall_module_leaves_lionexec_act_alcall_the_function() -> None:
    module = import_fresh("lionexec.act.alcall")
    assert lionexec.act.alcall is lionexec.alcall
    assert inspect.iscoroutinefunction(lionexec.act.alcall)
    assert module.alcall is lionexec.alcall
