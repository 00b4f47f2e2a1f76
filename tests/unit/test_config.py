"""Configuration: defaults, environment overrides and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorch_runtime.config import ConfigError, load_settings


def test_defaults_work_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing set, the settings point at the embedded stack."""
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_TASK_QUEUE", "DLQ_QUEUE_NAME", "LLM_MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert settings.temporal_address == "localhost:7233"
    assert settings.temporal_task_queue == "ai-orchestrator"
    assert settings.dlq_queue_name == "ai-orchestrator-dlq"
    assert settings.llm_max_attempts == 5


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each contract variable is read from the environment."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", "temporal:7233")
    monkeypatch.setenv("TEMPORAL_TASK_QUEUE", "q2")
    monkeypatch.setenv("SQS_ENDPOINT_URL", "http://sqs:9324")
    monkeypatch.setenv("LLM_FALLBACK_MODEL", "small")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    settings = load_settings()
    assert settings.temporal_address == "temporal:7233"
    assert settings.temporal_task_queue == "q2"
    assert settings.sqs_endpoint_url == "http://sqs:9324"
    assert settings.llm_fallback_model == "small"
    assert settings.openai_api_key.get_secret_value() == "sk-secret"
    assert "sk-secret" not in repr(settings)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LLM_MAX_ATTEMPTS", "zero"),
        ("LLM_MAX_ATTEMPTS", "0"),
        ("REVIEW_TIMEOUT_S", "-5"),
        ("METRICS_HOST", "localhost"),
        ("HEALTH_HOST", "every-interface"),
    ],
)
def test_invalid_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """A bad value fails with one line that names the variable and the value it was given,
    then says what is wrong with it."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    prefix = f"invalid configuration: {name}={value!r}: "
    assert message.startswith(prefix) and len(message) > len(prefix), message
    assert "\n" not in message


def test_shared_limits_and_tenant_budgets_need_the_capacity_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LLM_RATE_LIMITS (or a tenant budget) without CAPACITY_STORE_URL stops the process with one
    line; with it, the JSON settings decode, a listed tenant has its budget, the runs that name
    no tenant share the default pool, and any other tenant has none."""
    from aiorch_runtime.config import ConfigError, RateLimit, load_settings

    monkeypatch.setenv("LLM_RATE_LIMITS", '{"gpt-4o": {"tpm": 30000, "rpm": 500}}')
    with pytest.raises(ConfigError, match="CAPACITY_STORE_URL"):
        load_settings()
    monkeypatch.setenv("CAPACITY_STORE_URL", "redis://:secret@redis:6379/0")
    monkeypatch.setenv("TENANT_BUDGETS_USD", '{"acme": 25}')
    monkeypatch.setenv("TENANT_BUDGET_DEFAULT_USD", "1")
    settings = load_settings()
    assert settings.llm_rate_limits == {"gpt-4o": RateLimit(tpm=30000, rpm=500)}
    assert (settings.tenant_budget("acme"), settings.tenant_budget("default")) == (25, 1)
    assert settings.tenant_budget("globex") is None
    assert "secret" not in repr(settings)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TENANT_BUDGETS_USD", '{"bad tenant": 1}'),
        ("TENANT_BUDGETS_USD", '{"acme": 0}'),
        ("LLM_RATE_LIMITS", '{"m": {"tpm": 0}}'),
        ("LLM_RATE_LIMITS", "not json"),
        ("CAPACITY_STORE_URL", "http://redis:6379"),
        ("BUDGET_POLICY", "maybe"),
    ],
)
def test_bad_capacity_and_budget_settings_are_one_line(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """Each invalid capacity or budget setting is refused naming its variable."""
    from aiorch_runtime.config import ConfigError, load_settings

    monkeypatch.setenv("CAPACITY_STORE_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        load_settings()


def test_the_document_store_url_is_a_secret_that_may_come_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """DOCUMENT_STORE_URL defaults to an SQLite file under .data; a PostgreSQL URL (it holds a
    password) may come from DOCUMENT_STORE_URL_FILE and never shows in the settings' repr."""
    monkeypatch.delenv("DOCUMENT_STORE_URL", raising=False)
    assert load_settings().document_store_url.get_secret_value() == "sqlite:///.data/documents.db"
    secret = tmp_path / "url"
    secret.write_text("postgresql://aiorch:hunter2@db:5432/documents\n")
    monkeypatch.setenv("DOCUMENT_STORE_URL_FILE", str(secret))
    settings = load_settings()
    url = settings.document_store_url.get_secret_value()
    assert url == "postgresql://aiorch:hunter2@db:5432/documents"
    assert "hunter2" not in repr(settings)


@pytest.mark.parametrize(
    "value", ["mysql://root:hunter2@db/documents", "hunter2", "sqlite:relative.db"]
)
def test_a_bad_document_store_url_is_one_line_without_the_value(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """A URL of another database, or no URL, stops the process with one line naming the
    variable and never quoting the value (it may hold a password)."""
    monkeypatch.setenv("DOCUMENT_STORE_URL", value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "DOCUMENT_STORE_URL" in message
    assert "hunter2" not in message
    assert "\n" not in message


def test_the_ledger_url_is_a_secret_that_may_come_from_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """LEDGER_URL defaults to an SQLite file under .data; the compose stack's PostgreSQL URL
    (it holds the writer's password) comes from LEDGER_URL_FILE and shows neither in the
    settings' repr nor in the line that refuses a bad one; both at once are refused."""
    monkeypatch.delenv("LEDGER_URL", raising=False)
    assert load_settings().ledger_url.get_secret_value() == "sqlite:///.data/ledger.db"
    secret = tmp_path / "url"
    secret.write_text("postgresql://ledger_writer:hunter2@postgres:5432/ledger\n")
    monkeypatch.setenv("LEDGER_URL_FILE", str(secret))
    settings = load_settings()
    assert settings.ledger_url.get_secret_value() == (
        "postgresql://ledger_writer:hunter2@postgres:5432/ledger"
    )
    assert "hunter2" not in repr(settings)
    monkeypatch.setenv("LEDGER_URL", "sqlite:///other.db")
    with pytest.raises(ConfigError, match="LEDGER_URL or LEDGER_URL_FILE"):
        load_settings()
    monkeypatch.delenv("LEDGER_URL")
    secret.write_text("mysql://root:hunter2@db/ledger\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "LEDGER_URL" in str(info.value) and "hunter2" not in str(info.value)


@pytest.mark.parametrize("variables", [{"LLM_BATCH": "allowed"}, {"LLM_RESULT_CACHE_TTL_S": "60"}])
def test_the_batch_lane_and_the_result_cache_need_the_capacity_store(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    """LLM_BATCH and LLM_RESULT_CACHE_TTL_S keep calls and replies in the capacity store:
    without CAPACITY_STORE_URL the process stops with one line naming them."""
    monkeypatch.delenv("CAPACITY_STORE_URL", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match="need CAPACITY_STORE_URL") as refused:
        load_settings()
    assert "\n" not in str(refused.value)
    monkeypatch.setenv("CAPACITY_STORE_URL", "redis://127.0.0.1:6379/0")
    load_settings()
