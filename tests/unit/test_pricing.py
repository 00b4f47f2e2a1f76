"""The LLM price table: cost estimates and the LLM_PRICE_TABLE variable."""

from __future__ import annotations

import pytest

from activities.pricing import estimate_cost
from aiorch.runtime.config import DEFAULT_PRICE_TABLE, ConfigError, ModelPrice, load_settings


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
