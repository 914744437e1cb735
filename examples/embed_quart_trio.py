"""lionexec inside a quart-trio application: a governed, journaled tool-call endpoint.

``POST /conversations/<conversation_id>/act`` with ``{"tool_calls": [...]}`` (OpenAI
``tool_calls`` items, or ``{"function", "arguments"}`` objects) runs the calls on the
conversation's branch, under a permission policy (``add`` is allowed, ``delete_everything``
is denied), and answers one JSON object per call. Every call is committed to lionexec's
journal before the answer is sent (``--journal PATH``; ``:memory:`` by default).

Run it with ``python examples/embed_quart_trio.py --port 8000`` (``--port 0`` picks a free
port and prints it). It needs quart-trio (which brings hypercorn): ``pip install quart-trio
lionexec``. The journal and the branches live in a background task of the app's own nursery,
started before serving and stopped (everything committed) after.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import uuid
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import Response, request
from quart_trio import QuartTrio

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
    """One journaled, governed branch per conversation, served in the service's nursery."""

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
    return Response(dumps(value), status=status, content_type="application/json")


def create_app(journal: str = ":memory:") -> QuartTrio:
    """The application, keeping its conversations in the journal *journal*."""
    app = QuartTrio(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY  # Quart answers 413 past it
    # After serving, the service below gets this long to commit and close before Quart
    # cancels its nursery (by default it cancels at once).
    app.config["BACKGROUND_TASK_SHUTDOWN_TIMEOUT"] = 10
    stopping = trio.Event()
    state: dict[str, Conversations] = {}

    async def service(*, task_status: trio.TaskStatus[Conversations]) -> None:
        async with open_journal(journal) as opened, trio.open_nursery() as nursery:
            conversations = Conversations(opened, nursery)
            task_status.started(conversations)
            try:
                await stopping.wait()
            finally:
                await conversations.aclose()

    @app.before_serving
    async def start() -> None:
        state["conversations"] = await app.nursery.start(service)

    @app.after_serving
    async def stop() -> None:
        stopping.set()

    @app.post("/conversations/<conversation_id>/act")
    async def act(conversation_id: str) -> Response:
        if not 0 < len(conversation_id) <= 128:
            return json_response({"error": "a conversation id has 1 to 128 characters"}, 400)
        try:
            tool_calls = _tool_calls(await request.get_data())
        except ValueError as exc:
            return json_response({"error": str(exc)}, 400)
        branch = await state["conversations"].branch(conversation_id)
        try:
            responses = await branch.act(tool_calls)
        except DuplicateCallError as exc:  # a re-sent call id: nothing was run or recorded
            return json_response({"error": str(exc)}, 409)
        except NotDurableError as exc:  # the journal did not commit: the answer would not last
            return json_response({"error": str(exc)}, 503)
        except ValueError as exc:  # a call that cannot be read (no function name, ...)
            return json_response({"error": str(exc)}, 400)
        return json_response([_answer(branch, response) for response in responses])

    return app


def _tool_calls(body: bytes | str) -> list[Any]:
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


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="the port (0: a free one)")
    parser.add_argument("--journal", default=":memory:", help="an SQLite file, or :memory:")
    options = parser.parse_args(argv)
    config = Config()
    config.bind = [f"{options.host}:{options.port}"]
    app = create_app(options.journal)
    async with trio.open_nursery() as nursery:
        # Stopped by SIGINT or SIGTERM through hypercorn's shutdown trigger, so the app's
        # shutdown runs (its branches commit what is left and the journal closes).
        urls = await nursery.start(partial(serve, app, config, shutdown_trigger=until_signal))
        print(f"quart-trio with lionexec on {urls[0]} (Ctrl+C to stop)", flush=True)


async def until_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
