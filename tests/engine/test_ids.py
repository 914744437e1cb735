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


def test_threads_drawing_at_once_never_share_an_id() -> None:
    import threading

    from lionexec import _ids

    _ids._pool.clear()  # every thread starts on an empty pool: they refill at once
    drawn: list[list[uuid.UUID]] = [[] for _ in range(8)]
    start = threading.Barrier(len(drawn))

    def draw(out: list[uuid.UUID]) -> None:
        start.wait()
        out.extend(uuid4() for _ in range(5 * _ids.BATCH))

    threads = [threading.Thread(target=draw, args=(out,)) for out in drawn]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    ids = [value for out in drawn for value in out]
    assert len(ids) == 8 * 5 * _ids.BATCH
    assert len(set(ids)) == len(ids)


def test_a_forked_child_draws_ids_its_parent_does_not() -> None:
    import os

    from lionexec import _ids

    uuid4()  # the pool holds the parent's next ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        try:
            os.write(write, b"".join(uuid4().bytes for _ in range(_ids.BATCH)))
        finally:
            os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    child = {uuid.UUID(bytes=data[i : i + 16]) for i in range(0, len(data), 16)}
    parent = {uuid4() for _ in range(_ids.BATCH)}
    assert len(child) == _ids.BATCH
    assert not child & parent
