"""`Settings`: every section in one object, read from the environment once (`load_settings`)."""

from __future__ import annotations

from typing import Any, Self, TypeVar

from pydantic import ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aiorch_runtime.config.auth import AuthSettings
from aiorch_runtime.config.budgets import BudgetSettings
from aiorch_runtime.config.dead_letters import DeadLetterSettings
from aiorch_runtime.config.experiments import ExperimentSettings
from aiorch_runtime.config.inbox import InboxSettings
from aiorch_runtime.config.inputs import InputSettings
from aiorch_runtime.config.lab import LabSettings
from aiorch_runtime.config.ledger import LedgerSettings
from aiorch_runtime.config.llm import LlmSettings
from aiorch_runtime.config.observability import ObservabilitySettings
from aiorch_runtime.config.pipelines import PipelineSettings
from aiorch_runtime.config.protection import PayloadProtectionSettings
from aiorch_runtime.config.review import ReviewSettings
from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config.stores import StoreSettings
from aiorch_runtime.config.temporal import TemporalSettings
from aiorch_runtime.config.worker import WorkerSettings
from aiorch_runtime.config_sources import (
    SECRET_FILE_FIELDS,
    secrets_from_files,
    temporal_from_profile,
)
from aiorch_runtime.errors import ConfigError

SectionT = TypeVar("SectionT", bound=SettingsSection)


# The sections in reverse: pydantic gathers fields and validators starting from the base
# furthest from the class, so the fields (and the errors of several invalid values) keep the
# reference's order, Temporal first.
class Settings(
    WorkerSettings,
    LabSettings,
    ExperimentSettings,
    LedgerSettings,
    ObservabilitySettings,
    BudgetSettings,
    DeadLetterSettings,
    StoreSettings,
    PayloadProtectionSettings,
    InputSettings,
    InboxSettings,
    AuthSettings,
    ReviewSettings,
    PipelineSettings,
    LlmSettings,
    TemporalSettings,
    BaseSettings,
):
    """Every setting, each read from the environment variable of the same name (upper case).

    Each field is declared in the section it belongs to and read here as a flat attribute
    (``settings.llm_model``); `section` hands one section out alone.
    """

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="")

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: Any) -> Any:
        """Secrets from their files first, then the Temporal profile (which the API key's file
        may override); one validator, so the order is explicit."""
        if not isinstance(data, dict):
            return data
        return temporal_from_profile(secrets_from_files(data))

    @model_validator(mode="after")
    def _store_backed_calls_need_the_store(self) -> Self:
        if self.capacity_store_url is None and (self.batch_enabled or self.result_cache_on):
            raise ConfigError(
                "LLM_BATCH and LLM_RESULT_CACHE_TTL_S keep their calls and replies in the "
                "capacity store: they need CAPACITY_STORE_URL (a Redis every worker reaches)"
            )
        return self

    @model_validator(mode="after")
    def _spill_over_needs_the_batch_lane(self) -> Self:
        if self.spill_over == "on" and not self.batch_enabled:
            raise ConfigError(
                "SPILL_OVER=on sends waiting calls through the batch lane: it needs LLM_BATCH "
                "(allowed or default)"
            )
        return self

    @model_validator(mode="after")
    def _experiments_need_the_store(self) -> Self:
        if self.experiments and self.capacity_store_url is None:
            raise ConfigError(
                "EXPERIMENTS keep their halts in the capacity store: they need "
                "CAPACITY_STORE_URL (a Redis every worker reaches)"
            )
        return self

    def section(self, group: type[SectionT]) -> SectionT:
        """The settings of one section alone, a frozen model equal to these fields of the whole
        (``settings.section(LlmSettings)``), for a component that needs no other.

        Raises:
            TypeError: ``group`` is not one of the sections `Settings` is made of.
        """
        if not any(group is section for section in SECTIONS):
            raise TypeError(f"{group.__name__} is not a section of the settings")
        return group.model_validate({name: getattr(self, name) for name in group.model_fields})


SECTIONS: tuple[type[SettingsSection], ...] = (
    TemporalSettings,
    LlmSettings,
    PipelineSettings,
    ReviewSettings,
    AuthSettings,
    InboxSettings,
    InputSettings,
    PayloadProtectionSettings,
    StoreSettings,
    DeadLetterSettings,
    BudgetSettings,
    ObservabilitySettings,
    LedgerSettings,
    LabSettings,
    ExperimentSettings,
    WorkerSettings,
)
"""The sections `Settings` is made of, in the order of the configuration reference."""


def _shown_input(item: Any) -> str:
    # A secret's rejected value must not reach the error line (or the log it ends up in).
    secret = bool(item["loc"]) and item["loc"][0] in SECRET_FILE_FIELDS
    return "'***'" if secret else repr(item.get("input"))


def load_settings() -> Settings:
    """Read the environment once.

    Raises:
        ConfigError: one line naming each variable whose value is invalid.
    """
    try:
        return Settings()
    except ValidationError as err:
        problems = [
            f"{'.'.join(str(p) for p in item['loc']).upper()}={_shown_input(item)}: {item['msg']}"
            for item in err.errors()
        ]
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
