"""Configuration: the only code that reads the environment.

One frozen, typed settings object is built at process start (``load_settings``). Every variable
has a local default that works with the embedded stack (``make dev``), so nothing needs setting
to try the project; production sets the addresses. An invalid value fails at once with one line
that names the variable.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from workflows.errors import OrchestratorError

DEFAULT_LLM_PORT = 8700
DEFAULT_SQS_PORT = 8701


class ConfigError(OrchestratorError):
    """An environment variable holds a value the project cannot use."""


class Settings(BaseSettings):
    """Every setting, each read from the environment variable of the same name (upper case)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="")

    # Temporal
    temporal_address: str = Field(default="localhost:7233", min_length=3)
    temporal_namespace: str = Field(default="default", min_length=1)
    temporal_task_queue: str = Field(default="ai-orchestrator", min_length=1)
    temporal_ui_url: str = "http://localhost:8233"

    # LLM (any OpenAI-compatible server; only Chat Completions and Embeddings are used)
    openai_base_url: str = f"http://127.0.0.1:{DEFAULT_LLM_PORT}/v1"
    openai_api_key: SecretStr = SecretStr("sim-local-key")
    llm_model: str = Field(default="sim-large", min_length=1)
    llm_fallback_model: str | None = "sim-small"
    embedding_model: str = Field(default="sim-embed", min_length=1)
    llm_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    llm_max_attempts: int = Field(default=5, ge=1, le=100)
    llm_fallback_after: int = Field(default=2, ge=1, le=100)
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

    # Vector store (Qdrant: a server URL, or embedded local mode at a path)
    vector_store_url: str | None = None
    vector_store_path: str = ".data/vectors"
    vector_collection: str = Field(default="ai-orchestrator", min_length=1)

    # Telemetry (standard OpenTelemetry variables)
    otel_exporter_otlp_endpoint: str | None = None
    otel_service_name: str = "ai-orchestrator"

    # Worker tuning
    worker_max_concurrent_activities: int = Field(default=200, ge=1, le=10000)
    worker_max_concurrent_workflow_tasks: int = Field(default=100, ge=1, le=10000)
    worker_max_cached_workflows: int = Field(default=2000, ge=0, le=100000)
    worker_shutdown_grace: timedelta = timedelta(seconds=30)


def load_settings() -> Settings:
    """Read the environment once.

    Raises:
        ConfigError: one line naming each variable whose value is invalid.
    """
    try:
        return Settings()
    except ValidationError as err:
        problems = [
            f"{'.'.join(str(p) for p in item['loc']).upper()}={item.get('input')!r}: {item['msg']}"
            for item in err.errors()
        ]
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
