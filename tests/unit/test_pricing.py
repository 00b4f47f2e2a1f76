"""The LLM price table: cost estimates and the LLM_PRICE_TABLE variable."""

from __future__ import annotations

import pytest

from activities.pricing import estimate_cost
from aiorch_runtime.config import DEFAULT_PRICE_TABLE, ConfigError, ModelPrice, load_settings


def test_cost_is_per_thousand_tokens_of_each_kind() -> None:
    """1,000 prompt and 500 completion tokens at 0.01/0.03 per 1K cost 0.025 USD."""
    prices = {"m": ModelPrice(prompt=0.01, completion=0.03)}
    assert estimate_cost(prices, "m", 1000, 500) == pytest.approx(0.025)
    assert estimate_cost(prices, "m", 0, 0) == 0


def test_unknown_model_has_no_estimate() -> None:
    """A model missing from the table gets None, not a misleading zero."""
    assert estimate_cost(DEFAULT_PRICE_TABLE, "gpt-unknown", 10, 10) is None


def test_default_table_prices_the_simulator_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of the box both chat models of the simulator have a price."""
    monkeypatch.delenv("LLM_PRICE_TABLE", raising=False)
    table = load_settings().llm_price_table
    assert {"sim-large", "sim-small"} <= set(table)


def test_price_table_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """LLM_PRICE_TABLE is JSON: model -> {prompt, completion} USD per 1K tokens."""
    monkeypatch.setenv("LLM_PRICE_TABLE", '{"gpt-x": {"prompt": 0.002, "completion": 0.008}}')
    table = load_settings().llm_price_table
    assert table == {"gpt-x": ModelPrice(prompt=0.002, completion=0.008)}


@pytest.mark.parametrize(
    "value", ['{"m": {"prompt": -1, "completion": 0}}', '{"m": {"prompt": 1}}', "not json"]
)
def test_bad_price_table_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """A negative, incomplete or unparsable table fails with one line naming the variable."""
    monkeypatch.setenv("LLM_PRICE_TABLE", value)
    with pytest.raises(ConfigError, match="LLM_PRICE_TABLE"):
        load_settings()


def test_cached_prompt_tokens_are_priced_at_the_cached_rate() -> None:
    """Of 2,000 prompt tokens, 1,920 read from the provider's cache cost the cached rate: at
    0.01/0.0025/0.03 per 1K, with 100 completion tokens, 0.0008 + 0.0048 + 0.003 USD."""
    prices = {"m": ModelPrice(prompt=0.01, completion=0.03, cached_prompt=0.0025)}
    cost = estimate_cost(prices, "m", 2000, 100, cached_tokens=1920)
    assert cost == pytest.approx(0.0008 + 0.0048 + 0.003)


def test_without_a_cached_rate_cached_tokens_cost_the_prompt_rate() -> None:
    """A table entry without cached_prompt charges cached tokens like any prompt token (no
    discount is assumed); more cached than prompt tokens is capped."""
    prices = {"m": ModelPrice(prompt=0.01, completion=0.03)}
    assert estimate_cost(prices, "m", 1000, 0, cached_tokens=800) == pytest.approx(0.01)
    cheap = {"m": ModelPrice(prompt=0.01, completion=0.03, cached_prompt=0.0)}
    assert estimate_cost(cheap, "m", 1000, 0, cached_tokens=5000) == 0


def test_the_batch_lane_pays_the_batch_share_of_every_rate() -> None:
    """A batched call pays the entry's batch share (0.5 by default, as OpenAI bills batches)
    of each rate, cached ones included."""
    prices = {
        "m": ModelPrice(prompt=0.01, completion=0.03, cached_prompt=0.0025),
        "n": ModelPrice(prompt=0.01, completion=0.03, batch=0.6),
    }
    sync = estimate_cost(prices, "m", 2000, 100, cached_tokens=1920)
    assert sync is not None
    assert estimate_cost(prices, "m", 2000, 100, cached_tokens=1920, lane="batch") == (
        pytest.approx(sync * 0.5)
    )
    assert estimate_cost(prices, "n", 1000, 0, lane="batch") == pytest.approx(0.006)


def test_price_table_takes_cached_and_batch_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    """LLM_PRICE_TABLE entries may name cached_prompt and batch; a batch share outside (0, 1]
    is refused with one line naming the variable."""
    monkeypatch.setenv(
        "LLM_PRICE_TABLE",
        '{"gpt-x": {"prompt": 0.002, "completion": 0.008, "cached_prompt": 0.0005, "batch": 0.5}}',
    )
    assert load_settings().llm_price_table["gpt-x"].cached_prompt == 0.0005
    monkeypatch.setenv("LLM_PRICE_TABLE", '{"m": {"prompt": 1, "completion": 1, "batch": 2}}')
    with pytest.raises(ConfigError, match="LLM_PRICE_TABLE"):
        load_settings()
