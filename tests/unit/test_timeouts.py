"""The run's one timer for tool timeouts (agentkernel/tools/timeouts.py): it cancels exactly the calls that ran
out of time, in expiry order, and tells them apart from cancellations it did not make."""

from __future__ import annotations

import asyncio

from agentkernel.tools.timeouts import Timeouts


async def _watched(timeouts: Timeouts, seconds: float, work: float, log: list[str], name: str) -> None:
    task = asyncio.current_task()
    assert task is not None
    timeouts.watch(task, seconds)
    try:
        await asyncio.sleep(work)
        log.append(f"{name} finished")
    except asyncio.CancelledError:
        log.append(f"{name} cut")
    finally:
        if timeouts.release(task):
            log.append(f"{name} ran out of time")


def test_only_the_calls_past_their_timeout_are_cut_in_the_order_they_expire() -> None:
    log: list[str] = []

    async def main() -> None:
        timeouts = Timeouts()
        try:
            await asyncio.gather(_watched(timeouts, 0.2, 5, log, "slow"), _watched(timeouts, 0.05, 5, log, "slower"),
                                 _watched(timeouts, 5, 0.01, log, "quick"))
        finally:
            timeouts.close()

    asyncio.run(main())
    assert log == ["quick finished", "slower cut", "slower ran out of time", "slow cut", "slow ran out of time"]


def test_a_cancellation_from_elsewhere_is_not_a_timeout() -> None:
    log: list[str] = []

    async def main() -> None:
        timeouts = Timeouts()
        task = asyncio.ensure_future(_watched(timeouts, 5, 5, log, "call"))
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        timeouts.close()

    asyncio.run(main())
    assert log == ["call cut"]  # not "ran out of time": someone else (Stop) cut it
