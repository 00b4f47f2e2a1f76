"""What a model call costs, from the price table (``LLM_PRICE_TABLE``, see
``aiorch_runtime.config.ModelPrice``): prompt tokens the provider read from its prompt cache at
the cached rate, the rest of the prompt and the reply at theirs, and a call through the
provider's batch API at the table's batch share of each. A model missing from the table has no
estimate (not a zero one)."""

from __future__ import annotations

from typing import Literal

from aiorch_runtime.config import PriceTable

Lane = Literal["sync", "batch"]


def estimate_cost(
    prices: PriceTable,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    *,
    cached_tokens: int = 0,
    lane: Lane = "sync",
) -> float | None:
    """The cost of one call in US dollars, or None when ``model`` has no price.

    ``cached_tokens`` are part of ``prompt_tokens`` (as providers report them), priced at the
    cached rate; ``lane`` ``batch`` pays the batch share of every rate.
    """
    price = prices.get(model)
    if price is None:
        return None
    cached = min(max(cached_tokens, 0), prompt_tokens)
    cached_rate = price.prompt if price.cached_prompt is None else price.cached_prompt
    usd = (
        (prompt_tokens - cached) * price.prompt
        + cached * cached_rate
        + completion_tokens * price.completion
    ) / 1000.0
    return usd * price.batch if lane == "batch" else usd
