"""The simulator's ``wrong_total`` directive over real HTTP with the real openai client: a field
extractor's ``total`` is wrong for the share of runs the directive names, chosen from the run
key, and only for calls to the model it names."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import openai
import pytest
import pytest_asyncio

from aiorch.devstack.llm_simulator import running_simulator

SCHEMA = {
    "type": "object",
    "properties": {"invoice_number": {"type": "string"}, "total": {"type": "string"}},
}
SYSTEM = "Extract the fields.\nJSON Schema: " + json.dumps(SCHEMA)
SEEDED = "[sim:wrong_total=0.6:model=sim-small][sim:wrong_total=0.05:model=sim-large]"
RUNS = 400


@pytest_asyncio.fixture(scope="module")
async def llm() -> AsyncIterator[openai.AsyncOpenAI]:
    async with (
        running_simulator(port=0, embedding_dim=8) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sim", max_retries=0, timeout=10) as llm,
    ):
        yield llm


async def total(llm: openai.AsyncOpenAI, document: str, model: str, run_id: str) -> str:
    """The ``total`` the simulator extracts from ``document`` in run ``run_id``."""
    reply = await llm.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": document}],
        extra_headers={"X-Run-Id": run_id},
    )
    content = reply.choices[0].message.content
    assert content is not None
    return str(json.loads(content)["total"])


async def wrong_share(llm: openai.AsyncOpenAI, model: str, directives: str) -> float:
    """The share of `RUNS` runs whose extracted total is not the document's 12.50."""
    document = f"Invoice number: INV-1\nTotal: 12.50\n{directives}"
    totals = [await total(llm, document, model, f"run-{n}") for n in range(RUNS)]
    assert set(totals) <= {"12.50", "13.50"}
    return sum(t != "12.50" for t in totals) / RUNS


@pytest.mark.parametrize(("model", "rate"), [("sim-small", 0.6), ("sim-large", 0.05)])
async def test_each_model_gets_a_wrong_total_at_its_own_rate(
    llm: openai.AsyncOpenAI, model: str, rate: float
) -> None:
    """Over 400 run keys, each model answers a total one above the document's for its own
    directive's share of the runs (within 0.06 of it), never for the other model's."""
    assert abs(await wrong_share(llm, model, SEEDED) - rate) < 0.06


async def test_a_directive_for_one_model_leaves_another_alone(llm: openai.AsyncOpenAI) -> None:
    """A ``wrong_total`` that names one model never changes another model's answer."""
    assert await wrong_share(llm, "sim-large", "[sim:wrong_total=1:model=sim-small]") == 0


async def test_a_run_always_gets_the_same_answer(llm: openai.AsyncOpenAI) -> None:
    """The choice comes from the run key: asked again, each run answers as before, and the
    runs wrong at a share of 0.05 are also wrong at 0.6."""
    document = "Invoice number: INV-2\nTotal: 99\n"
    low = [await total(llm, document + "[sim:wrong_total=0.05]", "m", f"k{n}") for n in range(60)]
    again = [await total(llm, document + "[sim:wrong_total=0.05]", "m", f"k{n}") for n in range(60)]
    high = [await total(llm, document + "[sim:wrong_total=0.6]", "m", f"k{n}") for n in range(60)]
    assert low == again
    assert {n for n, t in enumerate(low) if t != "99"} <= {
        n for n, t in enumerate(high) if t != "99"
    }
    assert set(high) == {"99", "100"}


@pytest.mark.parametrize(
    "directive",
    ["[sim:wrong_total]", "[sim:wrong_total=1.5]", "[sim:wrong_total=0.5:path=embeddings]"],
)
async def test_a_bad_rate_is_a_loud_400(llm: openai.AsyncOpenAI, directive: str) -> None:
    """A ``wrong_total`` without a share, with one outside 0 to 1 or for embeddings is
    answered with 400 naming the directive."""
    with pytest.raises(openai.BadRequestError) as caught:
        await total(llm, f"Total: 1 {directive}", "sim-large", "bad")
    assert directive in caught.value.message
