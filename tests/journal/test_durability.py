"""``durability=``: the setting each backend has in force on the connections that commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lionexec.journal import SqliteJournal, open_journal
from lionexec.journal.backends import SqliteBackend
from lionexec.tools import Tool

from ..support.postgres import PostgresServer

# PRAGMA synchronous reads back as a number: 1 NORMAL, 2 FULL, 3 EXTRA
_NORMAL, _FULL, _EXTRA = 1, 2, 3


async def _pragma(journal: Any) -> int:
    backend = journal.backend
    assert isinstance(backend, SqliteBackend)
    rows = await backend.run(lambda store: store.tx.execute("PRAGMA synchronous"))
    return int(rows[0][0])


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, _NORMAL),
        ({"durability": "process"}, _NORMAL),
        ({"durability": "power"}, _FULL),
        ({"synchronous": "EXTRA"}, _EXTRA),
    ],
)
async def test_sqlite_writer_connection_has_the_durability_asked_for(
    tmp_path: Path, options: dict[str, Any], expected: int
) -> None:
    async with SqliteJournal(tmp_path / "j.db", **options) as journal:
        assert await _pragma(journal) == expected
    # open_journal passes the setting through to the backend
    async with open_journal(tmp_path / "k.db", **options) as journal:
        assert await _pragma(journal) == expected


def test_sqlite_durability_names_the_setting_it_means() -> None:
    assert SqliteBackend("x.db").durability == "process"
    assert SqliteBackend("x.db", durability="power").durability == "power"
    assert SqliteBackend("x.db", synchronous="FULL").durability == "power"
    assert SqliteBackend("x.db", synchronous="NORMAL").durability == "process"


def test_a_bad_durability_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"durability must be 'process' .* or 'power' .*, not"):
        SqliteJournal("x.db", durability="disk")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"not both"):
        SqliteJournal("x.db", durability="power", synchronous="NORMAL")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("durability", "power"), [("process", False), ("power", True)])
async def test_postgres_commits_with_the_durability_asked_for(
    postgres_server: PostgresServer, durability: str, power: bool
) -> None:
    import psycopg

    url = postgres_server.create_database()
    dbname = url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_server.admin_url, autocommit=True) as admin:
        # a database whose own setting loses the last commits on a crash of the server (read
        # by every connection opened to it from now on)
        admin.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')
    from lionexec.journal import PostgresJournal

    async with PostgresJournal(url, durability=durability) as journal:  # type: ignore[arg-type]
        assert journal.backend.durability == durability  # type: ignore[attr-defined]
        rows = await journal.backend.run(lambda store: store.tx.execute("SHOW synchronous_commit"))
        # ... and the connection group commits go over (from the trio thread)
        branch = await journal.branch()
        branch.register_tools(Tool.from_function(_double, effect="pure"))
        async with branch:
            await branch.act({"function": "_double", "arguments": {"x": 1}})
        committing = journal.backend._native.conn  # type: ignore[attr-defined]
        [(setting,)] = committing.execute("SHOW synchronous_commit").fetchall()
    # "process": the database's own setting; "power": fsync'd commits, whatever it says
    assert rows[0][0] == setting == ("on" if power else "off")


async def _double(x: int) -> int:
    return 2 * x


def test_postgres_refuses_a_bad_durability() -> None:
    from lionexec.journal import PostgresJournal

    with pytest.raises(ValueError, match=r"durability must be 'process' .* or 'power' .*, not"):
        PostgresJournal("postgresql://x@127.0.0.1/x", durability="fsync")  # type: ignore[arg-type]
