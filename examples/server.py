"""lionexec inside a trio server, serving three demo tools: tool calls over HTTP.

The server is :mod:`lionexec.server` (its docstring and ``docs/server.md`` describe the
endpoints, the limits and what it promises); this program only brings the tools, as any
program embedding the server does. Run it with ``python examples/server.py --port 8000``
(127.0.0.1 unless ``--host`` says otherwise; ``--port 0`` picks a free port and prints it;
``--token`` or the ``LIONEXEC_SERVER_TOKEN`` environment variable turns on bearer-token
authentication; ``--journal PATH``, ``--database URL``, ``--workers``, ``--no-recover`` and
``--approve TOOL`` as for ``python -m lionexec serve``, which ``--help`` lists). It needs
hypercorn: ``pip install 'lionexec[server]'``.

To run the same server inside your own trio program instead::

    from lionexec.server import ServerConfig, open_app, serve

    async with open_app(ServerConfig(port=0), tools=DEMO_TOOLS) as app:
        async with trio.open_nursery() as nursery:
            [url] = await nursery.start(serve, app)

(``ServerConfig()`` keeps conversations in memory; ``journal="lionexec.db"`` or a
``postgresql://`` URL keeps them in lionexec's journal, as this program does by default.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

import trio

from lionexec.server import main

__all__ = ["DEMO_TOOLS", "get_weather", "slow_echo", "word_count"]


async def get_weather(city: str) -> dict[str, Any]:
    """Today's (made-up) weather for a city. An async tool."""
    await trio.lowlevel.checkpoint()
    return {"city": city, "forecast": "sunny", "high_c": 21}


def word_count(text: str) -> int:
    """Count the words in a text. A sync tool: lionexec runs it in a worker thread."""
    return len(text.split())


async def slow_echo(text: str, seconds: float = 60.0) -> str:
    """Echo a text after waiting some seconds: a call long enough to walk away from."""
    await trio.sleep(seconds)
    return text


#: The tools this program serves (``unsafe``, as any tool that does not say otherwise: a call
#: running when the server stopped is recorded ``interrupted`` by the next one).
DEMO_TOOLS: Final[tuple[Callable[..., Any], ...]] = (get_weather, word_count, slow_echo)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], tools=DEMO_TOOLS, title="lionexec demo server"))
