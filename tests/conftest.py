"""Shared test configuration: hypothesis profiles, and the session's PostgreSQL server.

``HYPOTHESIS_PROFILE=thorough`` runs many more examples; the default is fast enough for CI.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from .support.postgres import postgres_server as postgres_server

settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
