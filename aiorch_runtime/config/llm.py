"""The LLM calls: the provider, the models, timeouts and retries, the batch lane and caches."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, SecretStr

from aiorch_runtime.config.section import SettingsSection
from aiorch_runtime.config_docs import Section, SettingDoc

DEFAULT_LLM_PORT = 8700


class LlmSettings(SettingsSection):
    """How every chat and embeddings call is made (`Section.LLM`)."""

    SECTION: ClassVar[Section] = Section.LLM

    openai_base_url: Annotated[
        str, SettingDoc(Section.LLM, default="`http://127.0.0.1:8700/v1` (the simulator)")
    ] = Field(
        default=f"http://127.0.0.1:{DEFAULT_LLM_PORT}/v1",
        description="Any OpenAI-compatible server (Chat Completions and Embeddings only).",
    )
    openai_api_key: Annotated[SecretStr, SettingDoc(Section.LLM)] = Field(
        default=SecretStr("sim-local-key"),
        description="The API key for `OPENAI_BASE_URL` (the default is the simulator's).",
    )
    openai_api_key_file: Path | None = None
    llm_model: Annotated[str, SettingDoc(Section.LLM)] = Field(
        default="sim-large", min_length=1, description="The model every chat call tries first."
    )
    llm_fallback_model: Annotated[str | None, SettingDoc(Section.LLM)] = Field(
        default="sim-small",
        description="The model a step calls once it has failed `LLM_FALLBACK_AFTER` times in "
        "a row; empty: no fallback. A pipeline file's step may name its own.",
    )
    llm_fallback_after: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=2,
        ge=1,
        le=100,
        description="Failed attempts in a row before a step calls `LLM_FALLBACK_MODEL`.",
    )
    embedding_model: Annotated[str, SettingDoc(Section.LLM)] = Field(
        default="sim-embed", min_length=1, description="The embeddings model."
    )
    llm_timeout_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="How long one chat or embeddings call may take (its activity gets 15 s more).",
    )
    llm_max_attempts: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=5,
        ge=1,
        le=100,
        description="Failed attempts in a row after which a step gives up and the run is "
        "dead-lettered; a request's `options.llm_max_attempts` may only lower it.",
    )
    llm_temperature: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=0.2, ge=0, le=2, description="The sampling temperature of every chat call."
    )
    llm_backoff_initial_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="The longest wait after a step's first failed attempt: each wait is drawn "
        "between 0 and a ceiling that doubles with every failure in a row (full jitter), never "
        "shorter than the provider's Retry-After.",
    )
    llm_backoff_max_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=60.0,
        gt=0,
        le=86400,
        description="The largest ceiling of that wait.",
    )
    llm_max_output_tokens: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=4096,
        ge=1,
        le=1_000_000,
        description="The reply limit sent with every chat call (`max_tokens`); reserved, with "
        "the prompt's estimate, against `LLM_RATE_LIMITS` and budgets before the call.",
    )
    max_reply_chars: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=100_000,
        ge=1,
        le=1024 * 1024,
        description="The longest reply kept: a longer one fails its attempt for good "
        "(`LlmReplyTooLarge`) and never enters history.",
    )

    # Model cost (docs/cost.md)
    llm_batch: Annotated[Literal["off", "allowed", "default"], SettingDoc(Section.LLM)] = Field(
        default="off",
        description="The provider's batch API (Files + Batches) at half the price: `off`; "
        "`allowed` (runs that ask for it, `options.lane=batch`, go through it); `default` (runs "
        "go through it unless they ask for the synchronous lane). Needs `CAPACITY_STORE_URL`; "
        "every worker of the task queue must run this release first.",
    )
    llm_batch_size: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=1000, ge=1, le=50_000, description="The most calls one batch holds (per model)."
    )
    llm_batch_delay_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=60.0,
        gt=0,
        le=6 * 3600,
        description="How long a group of batched calls waits for more after its first, unless "
        "it fills up first; then it is submitted.",
    )
    llm_batch_poll_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=300.0,
        ge=1,
        le=3600,
        description="The longest wait between two polls of a submitted batch (polls start "
        "sooner and double).",
    )
    llm_batch_wait_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=50 * 3600.0,
        ge=60,
        le=14 * 86400,
        description="How long a run waits for its batched call's answer, then takes its retry "
        "path.",
    )
    llm_prompt_cache_scope: Annotated[
        Literal["off", "pipeline", "tenant"], SettingDoc(Section.LLM)
    ] = Field(
        default="off",
        description="The `prompt_cache_key` sent with every chat call, so a provider routes "
        "calls that share a prefix to the same cache: `off` (none), `pipeline`, or `tenant` "
        "(the pipeline and the run's tenant).",
    )
    llm_result_cache_ttl_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=0.0,
        ge=0,
        le=90 * 86400,
        description="How long a model call identical to one that succeeded (model, messages, "
        "parameters, pipeline version; per tenant) is answered from the capacity store without "
        "calling the provider; `0` turns the result cache off. Needs `CAPACITY_STORE_URL`, "
        "and `REQUESTER_PUBLIC_KEYS` (else a request names any tenant: a worker refuses to "
        "start); a request may refuse it (`options.result_cache: false`).",
    )

    @property
    def batch_enabled(self) -> bool:
        """True when runs may go through the provider's batch API (``LLM_BATCH``)."""
        return self.llm_batch != "off"

    @property
    def result_cache_on(self) -> bool:
        """True when model replies are kept for identical calls (``LLM_RESULT_CACHE_TTL_S``)."""
        return self.llm_result_cache_ttl_s > 0
