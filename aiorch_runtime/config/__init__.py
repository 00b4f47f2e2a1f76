"""Configuration: the only code that reads the environment.

One frozen, typed settings object is built at process start (``load_settings``). Every variable
has a local default that works with the embedded stack (``make dev``), so nothing needs setting
to try the project; production sets the addresses. An invalid value fails at once with one line
that names the variable. Each field carries what the configuration reference says about it: its
description and a `SettingDoc` (``aiorch_runtime.config_docs``), from which ``make graph`` writes
``docs/configuration.md`` and ``.env.example``.

The settings are grouped by the sections of that reference, one module and one frozen model
each (`TemporalSettings`, `LlmSettings`, `PipelineSettings`, `ReviewSettings`, `AuthSettings`,
`InboxSettings`, `InputSettings`, `PayloadProtectionSettings`, `StoreSettings`,
`DeadLetterSettings`, `BudgetSettings`, `ObservabilitySettings`, `LedgerSettings`,
`LabSettings`, `ExperimentSettings`, `WorkerSettings`; `SECTIONS`
lists them). A section holds its fields with their defaults, validators and docs, and the values
derived from them (``review_keys()``, ``tenant_budget()``, ``batch_enabled``...). `Settings`
inherits every section, so:

- each field is read from the variable of its own name, and stays a flat attribute of the
  whole: ``settings.llm_model``, ``settings.tenant_budgeted``;
- ``settings.section(LlmSettings)`` hands one section out alone, a frozen `LlmSettings` equal to
  those fields of the whole, so a component takes its group instead of every setting (and a
  test builds just that group: ``LlmSettings(llm_model="m")``);
- a check that spans sections (the batch lane and the result cache need the capacity store)
  lives on `Settings`, and so does reading the sources (``config_sources``).

The connection to Temporal is read the way the Temporal CLI and SDKs read it
(``temporalio.envconfig``): the profile ``TEMPORAL_PROFILE`` (default ``default``) of the TOML
file ``TEMPORAL_CONFIG_FILE`` (default ``~/.config/temporalio/temporal.toml``), overridden by the
standard ``TEMPORAL_*`` variables (those no field holds are listed in
``config_docs.OUTSIDE_VARIABLES``). The result is resolved once, here, into plain settings fields
(certificates read, secrets masked), so every process connects alike
(``aiorch_runtime.connection.connect``).
"""

from aiorch_runtime.config.auth import AuthSettings
from aiorch_runtime.config.budgets import (
    DEFAULT_PRICE_TABLE,
    BudgetSettings,
    ModelPrice,
    PriceTable,
    RateLimit,
    RateLimits,
    narrowed_priority,
)
from aiorch_runtime.config.dead_letters import DEFAULT_SQS_PORT, DeadLetterSettings
from aiorch_runtime.config.experiments import ExperimentSettings
from aiorch_runtime.config.inbox import DEFAULT_INBOX_PORT, InboxSettings
from aiorch_runtime.config.inputs import (
    DEFAULT_MAX_DOCUMENT_CHARS,
    DEFAULT_MAX_EXTRACT_CPU_S,
    DEFAULT_MAX_EXTRACT_MEMORY_BYTES,
    DEFAULT_MAX_INPUT_BYTES,
    DEFAULT_MAX_PDF_PAGES,
    InputSettings,
)
from aiorch_runtime.config.lab import DEFAULT_LAB_TENANT, LabSettings, lab_queue
from aiorch_runtime.config.ledger import DEFAULT_LEDGER_URL, LedgerSettings
from aiorch_runtime.config.llm import DEFAULT_LLM_PORT, LlmSettings
from aiorch_runtime.config.observability import DEFAULT_METRICS_PORT, ObservabilitySettings
from aiorch_runtime.config.pipelines import PipelineSettings
from aiorch_runtime.config.protection import DEFAULT_CODEC_PORT, PayloadProtectionSettings
from aiorch_runtime.config.review import ReviewSettings
from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config.settings import SECTIONS, Settings, load_settings
from aiorch_runtime.config.stores import DEFAULT_DOCUMENT_STORE_URL, StoreSettings
from aiorch_runtime.config.temporal import (
    DEFAULT_TEMPORAL_ADDRESS,
    DEFAULT_TEMPORAL_NAMESPACE,
    TemporalSettings,
)
from aiorch_runtime.config.worker import DEFAULT_HEALTH_PORT, WorkerSettings
from aiorch_runtime.errors import ConfigError

__all__ = [
    "DEFAULT_CODEC_PORT",
    "DEFAULT_DOCUMENT_STORE_URL",
    "DEFAULT_HEALTH_PORT",
    "DEFAULT_INBOX_PORT",
    "DEFAULT_LAB_TENANT",
    "DEFAULT_LEDGER_URL",
    "DEFAULT_LLM_PORT",
    "DEFAULT_MAX_DOCUMENT_CHARS",
    "DEFAULT_MAX_EXTRACT_CPU_S",
    "DEFAULT_MAX_EXTRACT_MEMORY_BYTES",
    "DEFAULT_MAX_INPUT_BYTES",
    "DEFAULT_MAX_PDF_PAGES",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_PRICE_TABLE",
    "DEFAULT_SQS_PORT",
    "DEFAULT_TEMPORAL_ADDRESS",
    "DEFAULT_TEMPORAL_NAMESPACE",
    "SECTIONS",
    "AuthSettings",
    "BudgetSettings",
    "ConfigError",
    "DeadLetterSettings",
    "ExperimentSettings",
    "InboxSettings",
    "InputSettings",
    "LabSettings",
    "LedgerSettings",
    "LlmSettings",
    "ModelPrice",
    "ObservabilitySettings",
    "PayloadProtectionSettings",
    "PipelineSettings",
    "PriceTable",
    "RateLimit",
    "RateLimits",
    "ReviewSettings",
    "Settings",
    "SettingsSection",
    "StoreSettings",
    "TemporalSettings",
    "WorkerSettings",
    "lab_queue",
    "load_settings",
    "narrowed_priority",
]
