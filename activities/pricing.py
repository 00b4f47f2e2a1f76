"""The cost estimate the worker reports as a metric, from the price table (``LLM_PRICE_TABLE``,
see ``aiorch.runtime.config.ModelPrice``). A model missing from the table has no estimate (not
a zero one)."""

from __future__ import annotations

from aiorch.runtime.config import PriceTable


def estimate_cost(
    prices: PriceTable, model: str, prompt_tokens: int, completion_tokens: int
) -> float | None:
    """The estimated cost of one call in US dollars, or None when ``model`` has no price."""
    price = prices.get(model)
    if price is None:
        return None
    return (prompt_tokens * price.prompt + completion_tokens * price.completion) / 1000.0
