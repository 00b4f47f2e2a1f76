"""LLM prices and the cost estimate the worker reports as a metric.

A price table maps a model name to what it costs, in US dollars per 1,000 prompt tokens and per
1,000 completion tokens (``LLM_PRICE_TABLE``, JSON). The default covers the simulator's models
with made-up but plausible figures, so the local stack shows a cost; production sets the real
prices of the models it uses. A model missing from the table has no estimate (not a zero one).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field


class ModelPrice(BaseModel):
    """US dollars per 1,000 tokens, for each kind of token."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)


PriceTable = Mapping[str, ModelPrice]

DEFAULT_PRICE_TABLE: dict[str, ModelPrice] = {
    "sim-large": ModelPrice(prompt=0.005, completion=0.015),
    "sim-small": ModelPrice(prompt=0.0005, completion=0.0015),
}


def estimate_cost(
    prices: PriceTable, model: str, prompt_tokens: int, completion_tokens: int
) -> float | None:
    """The estimated cost of one call in US dollars, or None when ``model`` has no price."""
    price = prices.get(model)
    if price is None:
        return None
    return (prompt_tokens * price.prompt + completion_tokens * price.completion) / 1000.0
