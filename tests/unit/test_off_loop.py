"""The model's stream read on the model I/O thread: the same events in the same order, its failure raised where the
run reads it, an early close cancelling the request there, and the stream read while the caller's loop is blocked."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_server import Reply, ScriptedServer, responses_events

from agentkernel import ScriptedModel, run
from agentkernel.models.base import ModelError, ModelRequest, TextDelta
from agentkernel.models.off_loop import OffLoopModel, reads_a_network
from agentkernel.models.openai_responses import OpenAIResponsesModel


class Listed:
    """A model that yields the given events, sleeping 0 or a little between some, and records its thread."""

    name = "listed"
    max_output_tokens = 7

    def __init__(self, events: list[Any], pauses: list[bool] | None = None, fail: BaseException | None = None):
        self.events, self.pauses, self.fail = events, pauses or [], fail
        self.threads: set[str] = set()
        self.closed = threading.Event()

    async def stream(self, request: ModelRequest) -> Any:
        try:
            for i, event in enumerate(self.events):
                self.threads.add(threading.current_thread().name)
                if i < len(self.pauses) and self.pauses[i]:
                    await asyncio.sleep(0.001)
                yield event
            if self.fail is not None:
                raise self.fail
        finally:
            self.closed.set()


def request() -> ModelRequest:
    return ModelRequest("", [], [])


async def collect(model: Any) -> list[Any]:
    return [event async for event in model.stream(request())]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=5), max_size=60), st.lists(st.booleans(), max_size=60))
def test_every_event_arrives_once_in_order_from_the_io_thread(texts: list[str], pauses: list[bool]) -> None:
    inner = Listed([TextDelta(t) for t in texts], pauses)
    got = asyncio.run(collect(OffLoopModel(inner)))
    assert [e.text for e in got] == texts
    assert inner.threads <= {"agentkernel model I/O"}


def test_a_failure_is_raised_where_the_stream_is_read_after_the_events_before_it() -> None:
    inner = Listed([TextDelta("a"), TextDelta("b")], fail=ModelError("the server went away"))
    seen: list[str] = []

    async def main() -> None:
        async for event in OffLoopModel(inner).stream(request()):
            seen.append(event.text)

    with pytest.raises(ModelError, match="went away"):
        asyncio.run(main())
    assert seen == ["a", "b"]


def test_closing_the_stream_early_closes_the_models_stream_on_the_io_thread() -> None:
    inner = Listed([TextDelta(str(i)) for i in range(10_000)], [True] * 10_000)

    async def main() -> None:
        stream = OffLoopModel(inner).stream(request())
        await anext(stream)
        await stream.aclose()

    asyncio.run(main())
    assert inner.closed.wait(5)


def test_the_wrapper_is_the_model_for_everything_but_the_stream() -> None:
    inner = Listed([])
    model = OffLoopModel(inner)
    assert model.name == "listed" and model.max_output_tokens == 7 and model.inner is inner
    assert reads_a_network(OpenAIResponsesModel("m", base_url="http://127.0.0.1:9/v1", api_key="k"))
    assert not reads_a_network(ScriptedModel(["hi"])) and not reads_a_network(inner)


def test_the_stream_is_read_while_the_callers_loop_is_blocked() -> None:
    """A real SDK stream from the loopback server: while the caller's loop sleeps in a blocking call, the deltas are
    read on the I/O thread (as a background run's are while a user's cell blocks)."""
    events = responses_events([f"w{i} " for i in range(100)])
    read: list[float] = []

    class Stamped:
        name = "stamped"

        def __init__(self, inner: Any):
            self.inner = inner

        async def stream(self, request: ModelRequest) -> Any:
            async for event in self.inner.stream(request):
                read.append(time.monotonic())
                yield event

    with ScriptedServer(Reply(events=events, delay=0.02)) as server:
        model = OffLoopModel(Stamped(OpenAIResponsesModel("m", base_url=server.url, api_key="k")))

        async def main() -> tuple[float, float, Any]:
            task = asyncio.ensure_future(run("go", model=model))
            while not read:
                await asyncio.sleep(0.01)
            blocked, before = time.monotonic(), len(read)
            while len(read) < before + 15 and time.monotonic() < blocked + 30:  # the loop is held: the thread reads
                time.sleep(0.01)
            unblocked = time.monotonic()
            return blocked, unblocked, await task

        blocked, unblocked, result = asyncio.run(main())
    assert result.status == "complete" and result.answer == "".join(f"w{i} " for i in range(100))
    assert len([t for t in read if blocked < t < unblocked]) >= 15
