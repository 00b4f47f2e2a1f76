"""Configuration: the only code that reads the environment.

One frozen, typed settings object is built at process start (``load_settings``). Every variable
has a local default that works with the embedded stack (``make dev``), so nothing needs setting
to try the project; production sets the addresses. An invalid value fails at once with one line
that names the variable.

The connection to Temporal is read the way the Temporal CLI and SDKs read it
(``temporalio.envconfig``): the profile ``TEMPORAL_PROFILE`` (default ``default``) of the TOML
file ``TEMPORAL_CONFIG_FILE`` (default ``~/.config/temporalio/temporal.toml``), overridden by the
standard variables ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``,
``TEMPORAL_TLS``, ``TEMPORAL_TLS_CLIENT_CERT_PATH``/``_DATA``, ``TEMPORAL_TLS_CLIENT_KEY_PATH``/
``_DATA``, ``TEMPORAL_TLS_SERVER_CA_CERT_PATH``/``_DATA``, ``TEMPORAL_TLS_SERVER_NAME`` and
``TEMPORAL_GRPC_META_*``. The result is resolved once, here, into plain settings fields
(certificates read, secrets masked), so every process connects alike
(``aiorch.runtime.connection.connect``).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from aiorch.runtime.config_sources import (
    SECRET_FILE_FIELDS,
    secrets_from_files,
    split_list,
    temporal_from_profile,
)
from aiorch.runtime.errors import ConfigError as ConfigError
from aiorch.runtime.temporal_profile import TemporalTls
from workflows.engine.identity import KeySpecError, parse_review_keys
from workflows.payloads import DEFAULT_TENANT, TENANT_PATTERN, ReviewKey

DEFAULT_LLM_PORT = 8700
DEFAULT_SQS_PORT = 8701
DEFAULT_CODEC_PORT = 8702
DEFAULT_INBOX_PORT = 8703
DEFAULT_METRICS_PORT = 9464
DEFAULT_HEALTH_PORT = 9465
DEFAULT_TEMPORAL_ADDRESS = "localhost:7233"
DEFAULT_TEMPORAL_NAMESPACE = "default"
# The largest document a run may reference (MAX_INPUT_BYTES): the claim check and the workers'
# input loader both refuse a larger one.
DEFAULT_MAX_INPUT_BYTES = 20 * 1024 * 1024
# The document pipeline's SQL store: an SQLite file next to the embedded vector store.
DEFAULT_DOCUMENT_STORE_URL = "sqlite:///.data/documents.db"


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

# The simulator's models, with made-up but plausible figures, so the local stack shows a cost;
# production sets the real prices of the models it uses.
DEFAULT_PRICE_TABLE: Mapping[str, ModelPrice] = MappingProxyType(
    {
        "sim-large": ModelPrice(prompt=0.005, completion=0.015, cached_prompt=0.00125),
        "sim-small": ModelPrice(prompt=0.0005, completion=0.0015, cached_prompt=0.000125),
    }
)


class Settings(BaseSettings):
    """Every setting, each read from the environment variable of the same name (upper case)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="")

    # Temporal (module docstring: read through temporalio.envconfig). Address, namespace and API
    # key: a variable of that name wins over the profile, the profile over the default.
    temporal_address: str = Field(default=DEFAULT_TEMPORAL_ADDRESS, min_length=3)
    temporal_namespace: str = Field(default=DEFAULT_TEMPORAL_NAMESPACE, min_length=1)
    temporal_profile: str | None = None
    temporal_config_file: Path | None = None
    temporal_api_key: SecretStr | None = None
    temporal_api_key_file: Path | None = None
    # Resolved from the profile and the TEMPORAL_TLS* / TEMPORAL_GRPC_META_* variables, never
    # parsed from one variable of these names. None = plain TCP (the local dev server).
    temporal_tls: Annotated[TemporalTls | None, NoDecode] = None
    temporal_grpc_meta: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, repr=False
    )
    temporal_task_queue: str = Field(default="ai-orchestrator", min_length=1)
    temporal_ui_url: str = "http://localhost:8233"

    # LLM (any OpenAI-compatible server; only Chat Completions and Embeddings are used)
    openai_base_url: str = f"http://127.0.0.1:{DEFAULT_LLM_PORT}/v1"
    openai_api_key: SecretStr = SecretStr("sim-local-key")
    llm_model: str = Field(default="sim-large", min_length=1)
    # The model tried after LLM_FALLBACK_AFTER failed attempts in a row (unset: none).
    llm_fallback_model: str | None = "sim-small"
    llm_fallback_after: int = Field(default=2, ge=1, le=100)
    embedding_model: str = Field(default="sim-embed", min_length=1)
    llm_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    llm_max_attempts: int = Field(default=5, ge=1, le=100)
    llm_temperature: float = Field(default=0.2, ge=0, le=2)
    llm_backoff_initial_s: float = Field(default=1.0, gt=0, le=3600)
    llm_backoff_max_s: float = Field(default=60.0, gt=0, le=86400)

    # Human review
    review_timeout_s: float = Field(default=24 * 3600.0, gt=0)
    escalation_timeout_s: float = Field(default=24 * 3600.0, gt=0)

    # Dead-letter queue (SQS; unset endpoint = real AWS)
    sqs_endpoint_url: str | None = None
    dlq_queue_name: str = Field(default="ai-orchestrator-dlq", min_length=1, max_length=80)
    aws_region: str = "us-east-1"
    # S3 for inputs given by reference (s3://bucket/key); unset = real AWS
    s3_endpoint_url: str | None = None

    # Data protection (README "Data protection"). Secrets come from the variable or from a file
    # named by <NAME>_FILE, never from inputs; SecretStr keeps them out of reprs and logs.
    openai_api_key_file: Path | None = None
    # Payload encryption: "id:base64key,id2:base64key"; unset = payloads stay plain text.
    payload_keys: SecretStr | None = None
    payload_keys_file: Path | None = None
    payload_key_id: str | None = None
    # The codec server (aiorch codec-server) for the Web UI and CLI.
    codec_server_host: str = "127.0.0.1"
    codec_server_port: int = Field(default=DEFAULT_CODEC_PORT, ge=0, le=65535)
    codec_server_token: SecretStr | None = None
    codec_server_token_file: Path | None = None
    # With keys configured: refuse payloads that are not encrypted (a plaintext start fails).
    require_encryption: bool = False
    # Who may review a run ("alice,bob"); unset = anyone. A request may only narrow this set.
    allowed_reviewers: Annotated[list[str] | None, NoDecode] = None
    # The least review a run gets: a request may ask for more (auto -> always), never less.
    review_min: Literal["never", "auto", "always"] = "auto"
    # Reviewer authentication: "key_id:base64 Ed25519 public key[:who]" entries; `who` is the
    # reviewers that key may sign for ("alice|bob", or * for an identity provider such as the
    # review inbox); without it, only the reviewer named key_id.
    review_public_keys: str | None = None
    review_public_keys_file: Path | None = None
    # "required" (the default): a worker without REVIEW_PUBLIC_KEYS refuses to start. "off"
    # accepts unsigned reviews, for a sandbox; the worker warns at every start
    # (aiorch.worker.app.review_auth_warning).
    review_auth: Literal["required", "off"] = "required"
    # The CLI's own signing key for reviews: "key_id:base64 Ed25519 private key (32 bytes)".
    reviewer_key: SecretStr | None = None
    reviewer_key_file: Path | None = None
    # How long a signed review stays valid after it is made (checked against workflow time).
    review_token_ttl_s: float = Field(default=600.0, gt=0, le=7 * 86400)
    # The review inbox (aiorch inbox serve): where it listens, the URL reviewers open
    # (links in `starter.py start` and in notifications), its signing key (its public half is
    # an `inbox:KEY:*` entry of REVIEW_PUBLIC_KEYS) and how it authenticates reviewers: hashed
    # per-reviewer tokens in a file, and/or the user header of an authenticating proxy.
    inbox_url: str | None = None
    inbox_host: str = "127.0.0.1"
    inbox_port: int = Field(default=DEFAULT_INBOX_PORT, ge=0, le=65535)
    inbox_signing_key: SecretStr | None = None
    inbox_signing_key_file: Path | None = None
    inbox_tokens_file: Path | None = None
    inbox_user_header: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]{1,64}$")
    # A token session ends this long after its login, however busy (logout ends it sooner).
    inbox_session_ttl_s: float = Field(default=8 * 3600.0, gt=0, le=7 * 86400)
    # Notifications: a webhook called when a run starts waiting for review and when it
    # escalates (off when unset). A Slack incoming-webhook URL is a credential: a secret.
    review_webhook_url: SecretStr | None = None
    review_webhook_url_file: Path | None = None
    review_webhook_format: Literal["json", "slack"] = "json"
    # Where referenced inputs (file://, s3://) may come from, besides the claim-check store:
    # directories ("/srv/inputs,/data/docs") and S3 "bucket/prefix" entries. None by default.
    input_file_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    input_s3_prefixes: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Bounded inputs: large documents travel by reference (claim check), never in history.
    claim_check_bucket: str = Field(default="ai-orchestrator-inputs", min_length=3)
    claim_check_dir: Path | None = None
    claim_check_threshold_bytes: int = Field(default=32 * 1024, ge=1)
    max_inline_message_bytes: int = Field(default=256 * 1024, ge=1, le=256 * 1024)
    max_input_bytes: int = Field(default=DEFAULT_MAX_INPUT_BYTES, ge=1)
    max_feedback_chars: int = Field(default=4000, ge=1, le=16 * 1024)
    max_reply_chars: int = Field(default=100_000, ge=1, le=1024 * 1024)
    # A reedit loop continues as a new run after this many review rounds (history stays small).
    reedit_rounds_per_run: int = Field(default=50, ge=1, le=1000)

    # Vector store (Qdrant: a server URL, or embedded local mode at a path). A server's API key
    # (a secret, sent with every request: use https://) and the CA that signed its certificate
    # (unset: the system's roots) apply to server mode only.
    vector_store_url: str | None = None
    vector_store_api_key: SecretStr | None = None
    vector_store_api_key_file: Path | None = None
    vector_store_ca_cert_path: Path | None = None
    vector_store_path: str = ".data/vectors"
    vector_collection: str = Field(default="ai-orchestrator", min_length=1)

    # The document pipeline's store of extracted fields (SQL): an SQLite file by default, or
    # PostgreSQL (postgresql://user:password@host:port/db). A secret: it may hold a password.
    document_store_url: SecretStr = SecretStr(DEFAULT_DOCUMENT_STORE_URL)
    document_store_url_file: Path | None = None

    # Telemetry. The OTEL_* names are the standard OpenTelemetry variables: traces go over OTLP
    # when the endpoint is set (the exporter itself also reads OTEL_EXPORTER_OTLP_HEADERS,
    # _TIMEOUT, _COMPRESSION, _CERTIFICATE and the _TRACES_ variants); nothing when unset.
    otel_exporter_otlp_endpoint: str | None = None
    otel_exporter_otlp_protocol: Literal["grpc", "http/protobuf"] = "grpc"
    otel_service_name: str = Field(default="ai-orchestrator", min_length=1)
    # Prompt and reply text may hold personal data: only in spans when explicitly enabled.
    otel_capture_content: bool = False
    # The worker's Prometheus endpoint (http://METRICS_HOST:METRICS_PORT/metrics); 0 turns it
    # off. Loopback unless told otherwise: it names models, costs, tenants and the task queue.
    metrics_host: str = Field(default="127.0.0.1", min_length=1)
    metrics_port: int = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535)
    # USD per 1K tokens by model (JSON): {"model": {"prompt": 0.005, "completion": 0.015,
    # "cached_prompt": 0.00125, "batch": 0.5}} (cached_prompt and batch optional; see
    # ModelPrice). Decoded here (NoDecode), so a value that is not JSON is reported like any
    # invalid value.
    llm_price_table: Annotated[dict[str, ModelPrice], NoDecode] = Field(
        default_factory=lambda: dict(DEFAULT_PRICE_TABLE)
    )

    # Shared capacity and cost budgets (docs/capacity.md). The store every worker shares
    # (Redis: redis://[:password@]host:port/db, or rediss:// for TLS); a secret, it may hold a
    # password. Unset: no shared limits and no tenant budgets (LLM_RATE_LIMITS and
    # TENANT_BUDGETS_USD need it).
    capacity_store_url: SecretStr | None = None
    capacity_store_url_file: Path | None = None
    # Requests and tokens per minute per model (JSON {"model": {"rpm": N, "tpm": N}}), shared by
    # every worker calling that model at OPENAI_BASE_URL.
    llm_rate_limits: Annotated[dict[str, RateLimit], NoDecode] = Field(default_factory=dict)
    # The reply limit sent with every chat call (max_tokens), and reserved before it.
    llm_max_output_tokens: int = Field(default=4096, ge=1, le=1_000_000)
    # A reservation whose holder stops renewing it (a worker that died) is given back after this
    # (a tenant's is charged); a run waiting for capacity checks in every two of these at most.
    capacity_lease_s: float = Field(default=30.0, ge=1, le=3600)
    # Cost budgets in USD (priced with LLM_PRICE_TABLE): per run (a request may lower it), and
    # per tenant per UTC day (JSON {"tenant": USD}); TENANT_BUDGET_DEFAULT_USD is the one pool
    # the runs that name no tenant share. With either set, a run of any other tenant is refused.
    run_budget_usd: float | None = Field(default=None, gt=0)
    tenant_budgets_usd: Annotated[dict[str, float], NoDecode] = Field(default_factory=dict)
    tenant_budget_default_usd: float | None = Field(default=None, gt=0)
    # A call that would cross a budget: wait for an operator's decision, or dead-letter the run.
    budget_policy: Literal["wait", "fail"] = "wait"
    budget_decision_timeout_s: float = Field(default=24 * 3600.0, gt=0, le=365 * 86400)

    # Model cost (docs/cost.md). The provider's batch API (OpenAI's Files + Batches): "off";
    # "allowed" (runs that ask for it, options.lane=batch, go through it); "default" (runs go
    # through it unless they ask for the synchronous lane). Needs CAPACITY_STORE_URL. Calls are
    # grouped per model, up to LLM_BATCH_SIZE, submitted LLM_BATCH_DELAY_S after a group's first
    # call (or once it is full), and polled at most every LLM_BATCH_POLL_S; a run waits at most
    # LLM_BATCH_WAIT_S for its result, then takes its retry path.
    llm_batch: Literal["off", "allowed", "default"] = "off"
    llm_batch_size: int = Field(default=1000, ge=1, le=50_000)
    llm_batch_delay_s: float = Field(default=60.0, gt=0, le=6 * 3600)
    llm_batch_poll_s: float = Field(default=300.0, ge=1, le=3600)
    llm_batch_wait_s: float = Field(default=50 * 3600.0, ge=60, le=14 * 86400)
    # The prompt_cache_key sent with every chat call (providers that take one route calls with
    # the same key to the same prompt cache): "off" (none sent), "pipeline", or "tenant" (the
    # pipeline and the run's tenant).
    llm_prompt_cache_scope: Literal["off", "pipeline", "tenant"] = "off"
    # The result cache (opt-in): a model call identical to one that already succeeded (model,
    # messages, parameters, pipeline version; per tenant) is answered from the capacity store
    # for this long, without calling the provider. 0 = off. Needs CAPACITY_STORE_URL.
    llm_result_cache_ttl_s: float = Field(default=0.0, ge=0, le=90 * 86400)

    # Worker tuning
    worker_max_concurrent_activities: int = Field(default=200, ge=1, le=10000)
    worker_max_concurrent_workflow_tasks: int = Field(default=100, ge=1, le=10000)
    # ~0.12 MiB per cached run (bench: 2,000 parked runs peak at ~450 MiB with 1000, ~565 with
    # 2000); a run evicted from the cache is replayed from history when it wakes.
    worker_max_cached_workflows: int = Field(default=1000, ge=0, le=100000)
    worker_workflow_task_pollers: int = Field(default=5, ge=2, le=1000)
    worker_activity_task_pollers: int = Field(default=5, ge=1, le=1000)
    worker_shutdown_grace: float = Field(default=30.0, ge=0, le=3600)
    # Liveness and readiness (http://HEALTH_HOST:HEALTH_PORT/healthz and /readyz); 0 turns them
    # off. Loopback unless told otherwise (0.0.0.0 where an orchestrator probes from outside).
    health_host: str = Field(default="127.0.0.1", min_length=1)
    health_port: int = Field(default=DEFAULT_HEALTH_PORT, ge=0, le=65535)

    # Rolling deploys (README "Rolling deploys"). WORKER_BUILD_ID names this worker's code; it
    # is reported to the server as the version WORKER_DEPLOYMENT_NAME.WORKER_BUILD_ID. Only with
    # WORKER_VERSIONING=true does the server route tasks by version (Worker Versioning); runs
    # then follow WORKER_VERSIONING_BEHAVIOR unless the workflow type says otherwise.
    worker_build_id: str | None = Field(default=None, min_length=1, max_length=255)
    worker_deployment_name: str = Field(
        default="ai-orchestrator", min_length=1, max_length=255, pattern=r"^[^.]+$"
    )
    worker_versioning: bool = False
    worker_versioning_behavior: Literal["auto_upgrade", "pinned"] = "auto_upgrade"

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: Any) -> Any:
        """Secrets from their files first, then the Temporal profile (which the API key's file
        may override); one validator, so the order is explicit."""
        if not isinstance(data, dict):
            return data
        return temporal_from_profile(secrets_from_files(data))

    @model_validator(mode="after")
    def _versioning_needs_a_build_id(self) -> Settings:
        if self.worker_versioning and self.worker_build_id is None:
            raise ConfigError("WORKER_VERSIONING=true needs WORKER_BUILD_ID (this build's id)")
        return self

    @field_validator("allowed_reviewers", mode="before")
    @classmethod
    def _split_reviewers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return split_list(value) or None
        return value

    @field_validator("llm_price_table", "llm_rate_limits", "tenant_budgets_usd", mode="before")
    @classmethod
    def _decode_json(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"not valid JSON ({err.msg} at position {err.pos})") from None

    @field_validator("tenant_budgets_usd")
    @classmethod
    def _tenant_budgets(cls, value: dict[str, float]) -> dict[str, float]:
        for tenant, usd in value.items():
            if not re.fullmatch(TENANT_PATTERN, tenant):
                raise ValueError(f"{tenant[:70]!r} is not a tenant name ({TENANT_PATTERN})")
            if not usd > 0:
                raise ValueError(f"the budget of {tenant!r} must be more than 0")
        return value

    @field_validator("capacity_store_url")
    @classmethod
    def _store_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None  # set but empty = unset
        if not re.fullmatch(r"rediss?://\S+", value.get_secret_value()):
            raise ValueError("must be a redis:// or rediss:// URL")
        return value

    @field_validator("document_store_url")
    @classmethod
    def _document_store_url(cls, value: SecretStr) -> SecretStr:
        url = value.get_secret_value()
        if not url:
            return SecretStr(DEFAULT_DOCUMENT_STORE_URL)  # set but empty = the default
        if not re.fullmatch(r"(sqlite(\+pysqlite)?:///|postgres(ql)?(\+psycopg)?://)\S+", url):
            raise ValueError("must be sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB")
        return value

    @field_validator("metrics_host", "health_host")
    @classmethod
    def _listen_address(cls, value: str) -> str:
        # The SDK's Prometheus endpoint takes an address, not a name.
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(
                "must be an IP address to listen on (127.0.0.1, 0.0.0.0, ::)"
            ) from None
        return value

    @field_validator("input_file_roots", "input_s3_prefixes", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        return split_list(value) if isinstance(value, str) else value

    @field_validator("input_s3_prefixes")
    @classmethod
    def _bucket_prefixes(cls, value: list[str]) -> list[str]:
        for entry in value:
            bucket, _, _ = entry.partition("/")
            if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
                raise ValueError(f"{entry!r} is not bucket/prefix (an S3 bucket name first)")
        return value

    @field_validator("inbox_url")
    @classmethod
    def _inbox_url(cls, value: str | None) -> str | None:
        if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else None

    @field_validator("review_webhook_url")
    @classmethod
    def _webhook_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None  # set but empty = unset
        if not re.fullmatch(r"https?://\S+", value.get_secret_value(), re.IGNORECASE):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _encryption_required_needs_keys(self) -> Settings:
        if self.require_encryption and self.payload_keys is None:
            raise ConfigError("REQUIRE_ENCRYPTION=true needs PAYLOAD_KEYS (or PAYLOAD_KEYS_FILE)")
        self.review_keys()
        if self.capacity_store_url is None and (self.llm_rate_limits or self.tenant_budgeted):
            raise ConfigError(
                "LLM_RATE_LIMITS and tenant budgets are shared by every worker: they need "
                "CAPACITY_STORE_URL (a Redis every worker reaches)"
            )
        if self.capacity_store_url is None and (self.batch_enabled or self.result_cache_on):
            raise ConfigError(
                "LLM_BATCH and LLM_RESULT_CACHE_TTL_S keep their calls and replies in the "
                "capacity store: they need CAPACITY_STORE_URL (a Redis every worker reaches)"
            )
        return self

    def review_keys(self) -> list[ReviewKey]:
        """The reviewer public keys (REVIEW_PUBLIC_KEYS); empty when none are configured.

        Raises:
            ConfigError: an entry is malformed, or the keys given hold no key at all (a file of
                comments, such as "# revoked pending rotation", is not "no authentication");
                checked when the settings are loaded.
        """
        source = "REVIEW_PUBLIC_KEYS_FILE" if self.review_public_keys_file else "REVIEW_PUBLIC_KEYS"
        if not self.review_public_keys and self.review_public_keys_file is None:
            return []  # unset, or set to nothing (= unset, as for every variable)
        try:
            keys = parse_review_keys(self.review_public_keys or "")
        except KeySpecError as err:
            raise ConfigError(f"{source}: {err}") from None
        if not keys:
            raise ConfigError(
                f"{source} holds no key (only comments or blank lines): list at least one "
                "key, or unset it"
            )
        return keys

    @property
    def allowed_file_roots(self) -> list[Path]:
        """Directories ``file://`` inputs may come from: INPUT_FILE_ROOTS and CLAIM_CHECK_DIR."""
        extra = [self.claim_check_dir] if self.claim_check_dir is not None else []
        return [*self.input_file_roots, *extra]

    @property
    def allowed_s3_prefixes(self) -> list[str]:
        """``bucket/prefix`` entries ``s3://`` inputs may come from: INPUT_S3_PREFIXES and the
        claim-check bucket's ``inputs/`` prefix (where the starter stores documents)."""
        return [*self.input_s3_prefixes, f"{self.claim_check_bucket}/inputs/"]

    @property
    def notifications_enabled(self) -> bool:
        """True when a review webhook is configured (``REVIEW_WEBHOOK_URL``)."""
        return self.review_webhook_url is not None

    @property
    def batch_enabled(self) -> bool:
        """True when runs may go through the provider's batch API (``LLM_BATCH``)."""
        return self.llm_batch != "off"

    @property
    def result_cache_on(self) -> bool:
        """True when model replies are kept for identical calls (``LLM_RESULT_CACHE_TTL_S``)."""
        return self.llm_result_cache_ttl_s > 0

    @property
    def tenant_budgeted(self) -> bool:
        """True when some tenant has a daily budget (TENANT_BUDGETS_USD or the default)."""
        return bool(self.tenant_budgets_usd) or self.tenant_budget_default_usd is not None

    def tenant_budget(self, tenant: str) -> float | None:
        """The daily budget of ``tenant`` in USD, or None when it has none: its
        TENANT_BUDGETS_USD entry, else for the runs that name no tenant (``default``) the pool
        they share, TENANT_BUDGET_DEFAULT_USD."""
        pool = self.tenant_budget_default_usd if tenant == DEFAULT_TENANT else None
        return self.tenant_budgets_usd.get(tenant, pool)

    @property
    def tracing_enabled(self) -> bool:
        """True when an OTLP endpoint is configured."""
        return bool(self.otel_exporter_otlp_endpoint)


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
