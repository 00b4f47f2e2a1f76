"""The spill-over phase's count of duplicate batch submissions (``bench.batch_crash``), read from
a real simulator's Files and Batches API: a call whose name is in two batches is counted."""

from __future__ import annotations

import asyncio
import io
import json

from openai import AsyncOpenAI

from aiorch.devstack.llm_simulator import running_simulator
from bench.batch_crash import audit_batches


def openai_on(url: str) -> AsyncOpenAI:
    """The real ``openai`` client on the simulator at ``url``, without retries of its own."""
    return AsyncOpenAI(base_url=f"{url}/v1", api_key="sim", max_retries=0)


async def submit(client: AsyncOpenAI, names: list[str]) -> None:
    """One batch whose lines are calls named ``names``."""
    body = {"model": "sim-large", "messages": [{"role": "user", "content": "hello"}]}
    lines = [
        json.dumps({"custom_id": n, "method": "POST", "url": "/v1/chat/completions", "body": body})
        for n in names
    ]
    uploaded = await client.files.create(
        file=("calls.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch"
    )
    await client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )


async def test_a_call_in_two_batches_is_one_duplicate() -> None:
    """Batches holding calls a, b and then b, c: two batches, four lines, three calls, and b
    counted once as a duplicate; before the second batch, none."""
    async with running_simulator() as url, openai_on(url) as client:
        await submit(client, ["a", "b"])
        first = await asyncio.to_thread(audit_batches, url)
        await submit(client, ["b", "c"])
        second = await asyncio.to_thread(audit_batches, url)

    assert first.as_dict() == {"batches": 1, "lines": 2, "calls": 2, "duplicates": 0}
    assert second.as_dict() == {"batches": 2, "lines": 4, "calls": 3, "duplicates": 1}
