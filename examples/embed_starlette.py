"""lionexec inside a Starlette application on hypercorn's trio worker: a governed, journaled
tool-call endpoint.

``POST /conversations/{conversation_id}/act`` with ``{"tool_calls": [...]}`` (OpenAI
``tool_calls`` items, or ``{"function", "arguments"}`` objects) runs the calls on the
conversation's branch, under a permission policy (``add`` is allowed, ``delete_everything``
is denied), and answers one JSON object per call. Every call is committed to lionexec's
journal before the answer is sent (``--journal PATH``; ``:memory:`` by default).

Run it with ``python examples/embed_starlette.py --port 8000`` (``--port 0`` picks a free port
and prints it). It needs ``starlette`` and hypercorn: ``pip install starlette
'lionexec[server]'``. Starlette runs on anyio, so on trio; any other ASGI framework that runs
on trio embeds lionexec the same way: open the journal and a nursery for the branches in the
application's lifespan, and act in the request handlers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lionexec import ActionRequest, ActionResponse, Branch
from lionexec.errors import DuplicateCallError, NotDurableError
from lionexec.governance import PermissionPolicy
from lionexec.journal import Journal, open_journal
from lionexec.serialization import dumps
from lionexec.tools import Tool

MAX_BODY = 1024 * 1024
#: Conversation ids (any text) map to branch ids (UUIDs) in this namespace.
NAMESPACE = uuid.UUID("6c696f6e-6578-6563-0000-000000000001")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def delete_everything() -> None:
    """A tool the policy never lets run."""
    raise AssertionError("denied calls never run")


TOOLS = [Tool.from_function(add, effect="pure"), Tool.from_function(delete_everything)]
POLICY = PermissionPolicy(mode="rules", allow={"add": ["*"]})


class Conversations:
    """One journaled, governed branch per conversation, served in the app's nursery."""

    def __init__(self, journal: Journal, nursery: trio.Nursery) -> None:
        self.journal = journal
        self.nursery = nursery
        self.branches: dict[str, Branch] = {}
        # Two first requests of one conversation must not open (and serve) its branch twice.
        self.lock = trio.Lock()

    async def branch(self, conversation_id: str) -> Branch:
        async with self.lock:
            branch = self.branches.get(conversation_id)
            if branch is None:
                branch_id = uuid.uuid5(NAMESPACE, conversation_id)
                branch = await self.journal.branch(branch_id, policy=POLICY)
                branch.register_tools(TOOLS)
                await self.nursery.start(branch.serve)  # a journaled branch must be running
                self.branches[conversation_id] = branch
            return branch

    async def aclose(self) -> None:
        """Stop every branch: what is left is committed, and their services end."""
        for branch in self.branches.values():
            await branch.aclose()


def json_response(value: Any, status: int = 200) -> Response:
    return Response(dumps(value), status_code=status, media_type="application/json")


async def act(request: Request) -> Response:
    conversation_id = request.path_params["conversation_id"]
    if not 0 < len(conversation_id) <= 128:
        return json_response({"error": "a conversation id has 1 to 128 characters"}, 400)
    body = await request.body()
    if len(body) > MAX_BODY:
        return json_response({"error": f"the body is over {MAX_BODY} bytes"}, 413)
    try:
        tool_calls = _tool_calls(body)
    except ValueError as exc:
        return json_response({"error": str(exc)}, 400)
    conversations: Conversations = request.app.state.conversations
    branch = await conversations.branch(conversation_id)
    try:
        responses = await branch.act(tool_calls)
    except DuplicateCallError as exc:  # a re-sent call id: nothing was run or recorded
        return json_response({"error": str(exc)}, 409)
    except NotDurableError as exc:  # the journal did not commit: the answer would not last
        return json_response({"error": str(exc)}, 503)
    except ValueError as exc:  # a call that cannot be read (no function name, ...)
        return json_response({"error": str(exc)}, 400)
    return json_response([_answer(branch, response) for response in responses])


def _tool_calls(body: bytes) -> list[Any]:
    try:
        parsed = json.loads(body)
    except ValueError:
        raise ValueError("the body is not JSON") from None
    calls = parsed.get("tool_calls") if isinstance(parsed, dict) else None
    if not isinstance(calls, list) or not calls:
        raise ValueError('the body must be {"tool_calls": [...]} with at least one call')
    return calls


def _answer(branch: Branch, response: ActionResponse) -> dict[str, Any]:
    request_id = response.action_request_id
    request = branch.messages[request_id] if request_id is not None else None
    call_id = request.call_id if isinstance(request, ActionRequest) else None
    error = response.error
    return {
        "call_id": call_id,
        "function": response.function,
        "outcome": response.outcome.value,
        "output": response.output,
        "error": None if error is None else {"type": error.type, "message": error.message},
    }


def create_app(journal: str = ":memory:") -> Starlette:
    """The application, keeping its conversations in the journal *journal*."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_journal(journal) as opened, trio.open_nursery() as nursery:
            conversations = Conversations(opened, nursery)
            app.state.conversations = conversations
            try:
                yield
            finally:
                await conversations.aclose()

    routes = [Route("/conversations/{conversation_id}/act", act, methods=["POST"])]
    return Starlette(routes=routes, lifespan=lifespan)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="the port (0: a free one)")
    parser.add_argument("--journal", default=":memory:", help="an SQLite file, or :memory:")
    options = parser.parse_args(argv)
    config = Config()
    config.bind = [f"{options.host}:{options.port}"]
    # (Starlette's own ASGI types are looser than hypercorn's; the app is one all the same)
    app = cast(ASGIFramework, create_app(options.journal))
    async with trio.open_nursery() as nursery:
        # Stopped by SIGINT or SIGTERM through hypercorn's shutdown trigger, so the app's
        # shutdown runs (its branches commit what is left and the journal closes).
        urls = await nursery.start(partial(serve, app, config, shutdown_trigger=until_signal))
        print(f"Starlette with lionexec on {urls[0]} (Ctrl+C to stop)", flush=True)


async def until_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
