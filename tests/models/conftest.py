"""A scripted OpenAI-compatible provider on 127.0.0.1 (ephemeral port) for the model tests."""

from __future__ import annotations

import pytest
import trio

from lionexec.models.testing import LocalProvider


@pytest.fixture
async def provider(nursery: trio.Nursery) -> LocalProvider:
    local = LocalProvider()
    await nursery.start(local.serve)
    return local
