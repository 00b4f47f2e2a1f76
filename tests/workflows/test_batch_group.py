"""The batch lane's LlmBatch workflow on the time-skipping server, its activities scripted: a
group waits for its delay or for being full, is submitted once a round, polled on timers that
double up to its poll interval, collected; an expired batch's unfinished calls go into another
round, the last of which fails what is still unfinished."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise

import pytest_asyncio
from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from workflows import contract
from workflows.batch.workflow import LlmBatch
from workflows.payloads import (
    BatchCollected,
    BatchGroup,
    BatchPolled,
    BatchRound,
    BatchSubmitted,
)

DELAY_S = 600.0
POLL_S = 8.0


@dataclass
class FakeBatchActivities:
    """Scripted submit/poll/collect: each round's batch answers ``done_after`` polls with the
    round's status, and a round's collection leaves ``unfinished`` calls."""

    statuses: list[str] = field(default_factory=lambda: ["completed"])
    unfinished: list[int] = field(default_factory=lambda: [0])
    done_after: int = 3
    nothing: bool = False
    submitted: list[tuple[BatchRound, datetime]] = field(default_factory=list)
    polls: list[tuple[str, datetime]] = field(default_factory=list)
    collected: list[BatchRound] = field(default_factory=list)

    @activity.defn(name=contract.ACTIVITY_SUBMIT_BATCH)
    async def submit_batch(self, batch: BatchRound) -> BatchSubmitted:
        self.submitted.append((batch, activity.info().current_attempt_scheduled_time))
        if self.nothing:
            return BatchSubmitted(dropped=2)
        return BatchSubmitted(batch_id=f"batch-r{batch.round}", calls=5)

    @activity.defn(name=contract.ACTIVITY_POLL_BATCH)
    async def poll_batch(self, batch_id: str) -> BatchPolled:
        self.polls.append((batch_id, activity.info().current_attempt_scheduled_time))
        count = sum(1 for polled, _ in self.polls if polled == batch_id)
        status = self.statuses[int(batch_id[-1])]
        done = count >= self.done_after
        return BatchPolled(status=status if done else "in_progress", done=done)

    @activity.defn(name=contract.ACTIVITY_COLLECT_BATCH)
    async def collect_batch(self, batch: BatchRound) -> BatchCollected:
        self.collected.append(batch)
        left = 0 if batch.last else self.unfinished[batch.round]
        return BatchCollected(answered=5 - left, unfinished=left)


@dataclass
class Groups:
    env: WorkflowEnvironment
    task_queue: str
    fakes: FakeBatchActivities

    async def run(self, *, rounds: int = 3) -> tuple[BatchCollected, datetime]:
        """Run a group to its end: what it collected, and when it started."""
        group = BatchGroup(
            scope="abc:sim-large",
            model="sim-large",
            group=1,
            delay_s=DELAY_S,
            poll_s=POLL_S,
            rounds=rounds,
        )
        handle = await self.env.client.start_workflow(
            LlmBatch.run, group, id=f"batch-{uuid.uuid4()}", task_queue=self.task_queue
        )
        started = (await handle.describe()).start_time
        return await handle.result(), started


@pytest_asyncio.fixture
async def groups(env: WorkflowEnvironment) -> AsyncIterator[Groups]:
    task_queue = f"batch-{uuid.uuid4()}"
    fakes = FakeBatchActivities()
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[LlmBatch],
        activities=[fakes.submit_batch, fakes.poll_batch, fakes.collect_batch],
    ):
        yield Groups(env, task_queue, fakes)


def gaps(times: list[datetime]) -> list[float]:
    """Whole seconds between each time and the next."""
    return [round((later - earlier).total_seconds()) for earlier, later in pairwise(times)]


async def test_a_group_is_submitted_after_its_delay_and_polled_until_done(groups: Groups):
    """The group waits its delay, is submitted once, polled a second after, then two, then
    four seconds later (doubling, up to poll_s), and collected once the batch is done."""
    collected, started = await groups.run()
    assert collected == BatchCollected(answered=5)
    [(batch, submitted_at)] = groups.fakes.submitted
    assert batch.round == 0
    assert (submitted_at - started) >= timedelta(seconds=DELAY_S)
    times = [submitted_at, *(at for _, at in groups.fakes.polls)]
    assert gaps(times) == [1, 2, 4]
    [collect] = groups.fakes.collected
    assert (collect.batch_id, collect.last) == ("batch-r0", True)


async def test_a_full_group_is_submitted_before_its_delay(groups: Groups):
    """The batch_full signal (sent with signal-with-start by the call that fills the group)
    submits it at once, not after its delay."""
    group = BatchGroup(scope="abc:sim-large", model="sim-large", group=2, delay_s=DELAY_S, poll_s=1)
    handle = await groups.env.client.start_workflow(
        LlmBatch.run,
        group,
        id=f"batch-{uuid.uuid4()}",
        task_queue=groups.task_queue,
        start_signal=contract.SIGNAL_BATCH_FULL,
    )
    started = (await handle.describe()).start_time
    await handle.result()
    [(_, submitted_at)] = groups.fakes.submitted
    assert (submitted_at - started) < timedelta(seconds=DELAY_S)


async def test_an_expired_batch_resubmits_its_unfinished_calls(groups: Groups):
    """Round 0 expires with 2 calls unfinished: they go into round 1, whose batch completes;
    round 1's collection is the last."""
    groups.fakes.statuses = ["expired", "completed"]
    groups.fakes.unfinished = [2, 0]
    collected, _ = await groups.run()
    assert [batch.round for batch, _ in groups.fakes.submitted] == [0, 1]
    assert [(c.batch_id, c.last) for c in groups.fakes.collected] == [
        ("batch-r0", False),
        ("batch-r1", True),
    ]
    assert collected == BatchCollected(answered=8, unfinished=0)


async def test_the_last_round_fails_what_is_still_unfinished(groups: Groups):
    """A group whose batches keep expiring is submitted at most ``rounds`` times; the last
    collection is told it is the last (it fails the calls still unfinished)."""
    groups.fakes.statuses = ["expired", "expired"]
    groups.fakes.unfinished = [2, 2]
    await groups.run(rounds=2)
    assert [(c.round, c.last) for c in groups.fakes.collected] == [(0, False), (1, True)]


async def test_a_group_with_nothing_left_to_submit_ends_at_once(groups: Groups):
    """Every call dropped (their runs stopped waiting): no batch, no poll, no collection."""
    groups.fakes.nothing = True
    collected, _ = await groups.run()
    assert collected == BatchCollected()
    assert groups.fakes.polls == [] and groups.fakes.collected == []
