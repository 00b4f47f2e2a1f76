"""Costs, budgets and shared capacity (docs/capacity.md): model prices, rate limits, run and
tenant budgets, and the Redis every worker shares them through."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, ClassVar, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from aiorch_runtime.config.section import SettingsSection, decode_json
from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.errors import ConfigError
from workflows.payloads import DEFAULT_TENANT, TENANT_PATTERN


class ModelPrice(BaseModel):
    """US dollars per 1,000 tokens, for each kind of token (an ``LLM_PRICE_TABLE`` entry).

    ``cached_prompt``: the price of a prompt token the provider read from its prompt cache
    (``usage.prompt_tokens_details.cached_tokens``; None: the same as ``prompt``). ``batch``:
    the share of every rate a call through the provider's batch API pays (OpenAI's: half).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)
    cached_prompt: float | None = Field(default=None, ge=0)
    batch: float = Field(default=0.5, gt=0, le=1)


PriceTable = Mapping[str, ModelPrice]


class RateLimit(BaseModel):
    """A model's shared limits per minute (an ``LLM_RATE_LIMITS`` entry); None = not limited."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)


RateLimits = Mapping[str, RateLimit]

# Priorities run from 1 (most urgent) to 5, as Temporal's task queue priority keys do.
PRIORITY_RANGE: Final = range(1, 6)


def narrowed_priority(asked: int | None, most_urgent: int | None) -> int | None:
    """The priority a run asking for ``asked`` (None: none) gets when its tenant may be at most
    as urgent as ``most_urgent`` (TENANT_MAX_PRIORITY; None: any)."""
    if asked is None:
        return None
    return max(asked, most_urgent or PRIORITY_RANGE.start)


def _tenant_pairs(value: object) -> dict[str, str]:
    """``TENANT=VALUE,...`` (or a JSON object) as a mapping of tenant to text."""
    if not isinstance(value, str) or value.lstrip().startswith("{"):
        value = decode_json(value)
        if not isinstance(value, dict):
            raise ValueError("must be TENANT=VALUE,... or a JSON object")
        pairs = {str(tenant): str(number) for tenant, number in value.items()}
    else:
        pairs = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            tenant, sep, number = item.partition("=")
            if not sep or not tenant.strip() or not number.strip():
                raise ValueError(f"{item[:70]!r} is not TENANT=VALUE (e.g. acme=3,beta=1)")
            pairs[tenant.strip()] = number.strip()
    for tenant in pairs:
        if not re.fullmatch(TENANT_PATTERN, tenant):
            raise ValueError(f"{tenant[:70]!r} is not a tenant name ({TENANT_PATTERN})")
    return pairs


def _weights(value: object) -> dict[str, float]:
    weights: dict[str, float] = {}
    for tenant, text in _tenant_pairs(value).items():
        try:
            weights[tenant] = float(text)
        except ValueError:
            raise ValueError(f"the weight of {tenant!r} must be a number, not {text!r}") from None
    return weights


def _priorities(value: object) -> dict[str, int]:
    priorities: dict[str, int] = {}
    for tenant, text in _tenant_pairs(value).items():
        if text not in {str(n) for n in PRIORITY_RANGE}:
            raise ValueError(
                f"the priority of {tenant!r} must be 1 (most urgent) to 5, not {text!r}"
            )
        priorities[tenant] = int(text)
    return priorities


# The simulator's models, with made-up but plausible figures, so the local stack shows a cost;
# production sets the real prices of the models it uses.
DEFAULT_PRICE_TABLE: Mapping[str, ModelPrice] = MappingProxyType(
    {
        "sim-large": ModelPrice(prompt=0.005, completion=0.015, cached_prompt=0.00125),
        "sim-small": ModelPrice(prompt=0.0005, completion=0.0015, cached_prompt=0.000125),
    }
)


class BudgetSettings(SettingsSection):
    """What calls cost and how much may be spent (`Section.BUDGETS`)."""

    SECTION: ClassVar[Section] = Section.BUDGETS

    llm_price_table: Annotated[
        dict[str, ModelPrice],
        NoDecode,
        SettingDoc(Section.BUDGETS, default="the simulator's models"),
    ] = Field(
        default_factory=lambda: dict(DEFAULT_PRICE_TABLE),
        description='US dollars per 1,000 tokens by model, JSON `{"model": {"prompt": USD, '
        '"completion": USD, "cached_prompt": USD, "batch": FACTOR}}` (the last two optional: '
        "the price of prompt tokens the provider read from its cache, and the batch lane's "
        "price as a share of the synchronous one): the cost metric, a run's `cost_usd` and "
        "every budget. A model missing from it is unpriced (no cost, nothing held against a "
        "budget).",
    )
    capacity_store_url: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.BUDGETS,
            default="unset (nothing shared)",
            example="redis://:<password>@redis:6379/0",
        ),
    ] = Field(
        default=None,
        description="The Redis every worker shares for rate limits and tenant spend "
        "(`redis://[:password@]host:port/db`, `rediss://` for TLS); `LLM_RATE_LIMITS` and tenant "
        "budgets need it. The URL may hold a password.",
    )
    capacity_store_url_file: Path | None = None
    llm_rate_limits: Annotated[
        dict[str, RateLimit],
        NoDecode,
        SettingDoc(
            Section.BUDGETS,
            default="unset (not limited)",
            example='{"gpt-4o": {"rpm": 500, "tpm": 30000}}',
        ),
    ] = Field(
        default_factory=dict,
        description="Requests and tokens per minute per model at `OPENAI_BASE_URL`, JSON "
        '`{"model": {"rpm": N, "tpm": N}}`, shared by every worker.',
    )
    capacity_lease_s: Annotated[float, SettingDoc(Section.BUDGETS)] = Field(
        default=30.0,
        ge=1,
        le=3600,
        description="A reservation whose worker stops renewing it (it died) is given back "
        "after this (a spend reservation is charged in full); a run waiting for capacity "
        "checks in at least every two of these, and a place not kept leaves the queue.",
    )
    run_budget_usd: Annotated[
        float | None, SettingDoc(Section.BUDGETS, default="unset (none)", example="0.50")
    ] = Field(
        default=None,
        gt=0,
        description="A run's cost ceiling in USD; a request's `options.max_cost_usd` may lower it.",
    )
    tenant_budgets_usd: Annotated[
        dict[str, float],
        NoDecode,
        SettingDoc(Section.BUDGETS, default="unset (none)", example='{"acme": 25, "globex": 5}'),
    ] = Field(
        default_factory=dict,
        description='Each tenant\'s budget per UTC day in USD, JSON `{"tenant": USD}`. With '
        "this or `TENANT_BUDGET_DEFAULT_USD` set, a run naming any other tenant is refused.",
    )
    tenant_budget_default_usd: Annotated[
        float | None, SettingDoc(Section.BUDGETS, default="unset (none)", example="1")
    ] = Field(
        default=None,
        gt=0,
        description="The budget per UTC day of the one pool the runs that name no tenant share.",
    )
    tenant_weights: Annotated[
        dict[str, float],
        NoDecode,
        SettingDoc(Section.BUDGETS, default="unset (every tenant 1)", example="acme=3,beta=1"),
    ] = Field(
        default_factory=dict,
        description="Each tenant's weight in a model's queue, `TENANT=WEIGHT,...` (or a JSON "
        "object): while several tenants wait for a rate-limited model, each gets tokens in "
        "proportion to its weight; a tenant not listed weighs 1, and an idle tenant's share goes "
        "to the others.",
    )
    tenant_max_priority: Annotated[
        dict[str, int],
        NoDecode,
        SettingDoc(Section.BUDGETS, default="unset (any)", example="acme=1,beta=3"),
    ] = Field(
        default_factory=dict,
        description="The most urgent priority (1 most urgent to 5) a tenant's runs may ask for "
        "(`options.priority`), `TENANT=PRIORITY,...`: a run asking for more is lowered to it; a "
        "tenant not listed may ask for any.",
    )
    spill_over: Annotated[Literal["off", "on"], SettingDoc(Section.BUDGETS)] = Field(
        default="off",
        description="`on`: a batch-eligible run's model call (`options.batch_eligible`) that "
        "would queue for a rate-limited model longer than `SPILL_OVER_WAIT_S` goes through "
        "the batch lane instead, at the batch price; `off`: it queues. Needs `LLM_BATCH` "
        "(`allowed` or `default`).",
    )
    spill_over_wait_s: Annotated[float, SettingDoc(Section.BUDGETS)] = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="With `SPILL_OVER=on`: the queue wait for capacity past which a "
        "batch-eligible call takes the batch lane instead of waiting.",
    )
    budget_policy: Annotated[Literal["wait", "fail"], SettingDoc(Section.BUDGETS)] = Field(
        default="wait",
        description="A call that would cross a budget: `wait` for an operator's decision "
        "(`await_budget`; dead-lettered after `BUDGET_DECISION_TIMEOUT_S`), or `fail` "
        "(dead-lettered at once).",
    )
    budget_decision_timeout_s: Annotated[float, SettingDoc(Section.BUDGETS)] = Field(
        default=24 * 3600.0,
        gt=0,
        le=365 * 86400,
        description="How long a run waits for an operator's budget decision.",
    )

    _decode_budget_json = field_validator(
        "llm_price_table", "llm_rate_limits", "tenant_budgets_usd", mode="before"
    )(decode_json)

    @field_validator("tenant_budgets_usd")
    @classmethod
    def _tenant_budgets(cls, value: dict[str, float]) -> dict[str, float]:
        for tenant, usd in value.items():
            if not re.fullmatch(TENANT_PATTERN, tenant):
                raise ValueError(f"{tenant[:70]!r} is not a tenant name ({TENANT_PATTERN})")
            if not usd > 0:
                raise ValueError(f"the budget of {tenant!r} must be more than 0")
        return value

    @field_validator("tenant_weights", mode="before")
    @classmethod
    def _tenant_weights(cls, value: object) -> dict[str, float]:
        weights = _weights(value)
        for tenant, weight in weights.items():
            if not 0 < weight <= 1_000_000:
                raise ValueError(f"the weight of {tenant!r} must be more than 0 (and at most 1e6)")
        return weights

    _tenant_priorities = field_validator("tenant_max_priority", mode="before")(_priorities)

    @field_validator("capacity_store_url")
    @classmethod
    def _store_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None  # set but empty = unset
        if not re.fullmatch(r"rediss?://\S+", value.get_secret_value()):
            raise ValueError("must be a redis:// or rediss:// URL")
        return value

    @model_validator(mode="after")
    def _shared_limits_need_the_store(self) -> Self:
        if self.capacity_store_url is None and (self.llm_rate_limits or self.tenant_budgeted):
            raise ConfigError(
                "LLM_RATE_LIMITS and tenant budgets are shared by every worker: they need "
                "CAPACITY_STORE_URL (a Redis every worker reaches)"
            )
        return self

    @property
    def tenant_budgeted(self) -> bool:
        """True when some tenant has a daily budget (TENANT_BUDGETS_USD or the default)."""
        return bool(self.tenant_budgets_usd) or self.tenant_budget_default_usd is not None

    @property
    def named_tenants(self) -> frozenset[str]:
        """The tenants the settings name (budgets, weights, priorities): metrics label them."""
        return (
            frozenset(self.tenant_budgets_usd)
            | set(self.tenant_weights)
            | set(self.tenant_max_priority)
        )

    def tenant_weight(self, tenant: str) -> float:
        """``tenant``'s weight in a model's queue (TENANT_WEIGHTS; 1 when not listed)."""
        return self.tenant_weights.get(tenant, 1.0)

    def run_priority(self, tenant: str, asked: int | None) -> int | None:
        """The priority a run of ``tenant`` gets when it asks for ``asked`` (None: none)."""
        return narrowed_priority(asked, self.tenant_max_priority.get(tenant))

    def tenant_budget(self, tenant: str) -> float | None:
        """The daily budget of ``tenant`` in USD, or None when it has none: its
        TENANT_BUDGETS_USD entry, else for the runs that name no tenant (``default``) the pool
        they share, TENANT_BUDGET_DEFAULT_USD."""
        pool = self.tenant_budget_default_usd if tenant == DEFAULT_TENANT else None
        return self.tenant_budgets_usd.get(tenant, pool)
