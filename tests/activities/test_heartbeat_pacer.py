"""The pace of a looping activity's heartbeats (the batch lane's submission and collection): by
the clock, whatever each step costs, in Temporal's activity test environment."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio.testing import ActivityEnvironment

from activities.heartbeat import HeartbeatPacer


async def beats_of(steps: int, step_s: float, every: timedelta) -> list[tuple[object, ...]]:
    """Run a loop of ``steps`` steps of ``step_s`` seconds each, paced by a pacer of ``every``,
    as an activity; return its heartbeats."""
    env = ActivityEnvironment()
    beats: list[tuple[object, ...]] = []
    env.on_heartbeat = lambda *details: beats.append(details)

    async def loop() -> None:
        pacer = HeartbeatPacer(every)
        for count in range(steps):
            pacer.beat(f"step {count} of {steps}")
            await asyncio.sleep(step_s)

    await env.run(loop)
    return beats


async def test_a_loop_of_slow_steps_heartbeats_by_the_clock() -> None:
    """Eight steps of 50 ms paced at 60 ms heartbeat at least twice, each with its step, though
    far fewer than 100 steps ran: a loop that heartbeat every 100th step sent none, and a batch
    of 250 calls whose steps took 100 ms each outlived a 10 s heartbeat timeout unheard."""
    beats = await beats_of(8, 0.05, timedelta(milliseconds=60))
    assert len(beats) >= 2
    assert all(len(beat) == 1 and str(beat[0]).startswith("step ") for beat in beats)
    assert beats[0] != ("step 0 of 8",)  # the first comes once the interval has passed


async def test_a_loop_of_quick_steps_heartbeats_at_most_once_an_interval() -> None:
    """Ten thousand instant steps paced at one hour send no heartbeat: the pacer does not turn
    each step into one (a heartbeat that reaches the server is a billable action)."""
    assert await beats_of(10_000, 0, timedelta(hours=1)) == []
