"""The fast uuid4 makes ordinary, random, version-4 UUIDs."""

from __future__ import annotations

import pickle
import uuid

from lionexec._ids import uuid4


def test_ids_are_random_version_4_rfc_4122_uuids() -> None:
    ids = [uuid4() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids[:50]:
        assert type(value) is uuid.UUID
        assert value.version == 4
        assert value.variant == uuid.RFC_4122
        assert value.is_safe is uuid.SafeUUID.unknown


def test_ids_behave_like_stdlib_uuids() -> None:
    for value in (uuid4() for _ in range(200)):
        same = uuid.UUID(str(value))
        assert same == value
        assert hash(same) == hash(value)
        assert uuid.UUID(bytes=value.bytes) == value
        assert pickle.loads(pickle.dumps(value)) == value
        assert repr(value) == repr(same)
