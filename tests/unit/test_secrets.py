"""Secrets come only from the environment or a secrets file and never show up in reprs, dumps,
logs, prompts, history payloads or dead-letter bodies."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.dead_letter import fit_body
from activities.input_loader import InputLoader
from activities.planning import PlanDefaults
from activities.prompt import PromptActivities
from activities.redaction import REDACTED, content_free_dead_letter, scrub, scrubbed_error
from aiorch_runtime.codec import new_key
from aiorch_runtime.config import ConfigError, Settings, load_settings
from tests.support.builders import REQUEST_ID, dead_letter, history_entry, triage_fields
from workflows.payloads import DeadLetterMessage, PipelineRequest, PromptInput

API_KEY = "sk-canary-4c1d9e7f00aa11bb22cc33dd"


def test_api_key_is_secret_in_repr_dump_and_logs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """OPENAI_API_KEY (and the payload keys and codec token) load as SecretStr: repr, str,
    JSON dump and a logged settings object all mask them, while the code can still read them."""
    payload_key = new_key()
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("PAYLOAD_KEYS", f"k1:{payload_key}")
    monkeypatch.setenv("CODEC_SERVER_TOKEN", "tok-canary-123456")
    settings = load_settings()

    assert settings.openai_api_key.get_secret_value() == API_KEY
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("settings: %s / %r", settings, settings)
    for text in (repr(settings), str(settings), settings.model_dump_json(), caplog.text):
        for secret in (API_KEY, payload_key, "tok-canary-123456"):
            assert secret not in text


def test_secrets_can_come_from_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """<NAME>_FILE (Docker/Kubernetes secrets) supplies OPENAI_API_KEY, PAYLOAD_KEYS and
    CODEC_SERVER_TOKEN; the file's trailing newline is dropped."""
    for name, value in (
        ("OPENAI_API_KEY", API_KEY),
        ("CODEC_SERVER_TOKEN", "tok-from-file"),
        ("PAYLOAD_KEYS", f"k1:{new_key()}"),
    ):
        path = tmp_path / name.lower()
        path.write_text(value + "\n")
        monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv(f"{name}_FILE", str(path))
    settings = load_settings()
    assert settings.openai_api_key.get_secret_value() == API_KEY
    assert settings.codec_server_token is not None
    assert settings.codec_server_token.get_secret_value() == "tok-from-file"
    assert settings.payload_keys is not None


def test_secret_and_its_file_together_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Setting a secret both ways is ambiguous: one line says to pick one."""
    (tmp_path / "key").write_text(API_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "other")
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(tmp_path / "key"))
    with pytest.raises(ConfigError, match="OPENAI_API_KEY or OPENAI_API_KEY_FILE, not both"):
        load_settings()


def test_missing_secrets_file_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A secrets file that cannot be read fails at start with the variable and the reason."""
    monkeypatch.setenv("PAYLOAD_KEYS_FILE", "/nonexistent/keys")
    with pytest.raises(ConfigError, match=r"PAYLOAD_KEYS_FILE='/nonexistent/keys': cannot read"):
        load_settings()


async def test_prompt_plan_never_carries_the_key() -> None:
    """What fetch_prompt puts in history (the PromptPlan) holds no credential."""
    settings = Settings(openai_api_key=API_KEY)
    activities = PromptActivities(PlanDefaults.of(settings), InputLoader())
    request = PipelineRequest(request_id=REQUEST_ID, user_message="hello")
    plan = await ActivityEnvironment().run(activities.fetch_prompt, PromptInput(request=request))
    assert plan.user_prompt == "hello"
    assert API_KEY not in plan.model_dump_json()


def test_provider_errors_are_scrubbed_before_they_travel() -> None:
    """An error body that echoes the key (OpenAI's 401 does, partly masked) is scrubbed:
    the exact key, sk-style tokens and bearer tokens become [redacted]; type and
    retryability survive."""
    raw = ApplicationError(
        f"HTTP 401 from the LLM: Incorrect API key provided: {API_KEY}; sk-ab***********yz9",
        type="LlmPermanent",
        non_retryable=True,
    )
    clean = scrubbed_error(raw, [API_KEY])
    assert API_KEY not in clean.message
    assert "sk-ab" not in clean.message
    assert REDACTED in clean.message
    assert (clean.type, clean.non_retryable) == ("LlmPermanent", True)
    assert scrub("Authorization: Bearer abcdefghijklmnop") == f"Authorization: {REDACTED}"
    untouched = ApplicationError("timeout", type="LlmRetryable")
    assert scrubbed_error(untouched, [API_KEY]) is untouched


def test_dead_letter_body_is_built_from_run_data_only() -> None:
    """A dead-letter body is the message model's fields (request, history, error): nothing
    from the worker's settings can enter it."""
    message = dead_letter(
        "hi",
        last_error=scrub(f"HTTP 401: Incorrect API key provided: {API_KEY}", [API_KEY]),
        history=[history_entry("invoke_llm", "failed", "permanent_error")],
    )
    assert API_KEY not in fit_body(message)


def test_dead_letter_without_content_keeps_what_triage_and_redrive_need() -> None:
    """With encryption on, the SQS body keeps ids, failed state, attempts, the error's type and
    the states and events, and drops the message, metadata, error text and review details."""
    message = dead_letter(
        request={"request_id": REQUEST_ID, "user_message": "secret plan", "metadata": {"k": "v"}},
        last_error="LlmMalformedReply: reply is not JSON: 'secret plan...'",
        history=[
            history_entry(
                "await_review",
                "invoke_llm",
                "reedit",
                detail="reedit by ann: secret plan",
                reviewer="ann",
                feedback="secret plan",
                review_round=1,
            )
        ],
    )
    body = fit_body(content_free_dead_letter(message))
    assert "secret plan" not in body
    kept = DeadLetterMessage.model_validate_json(body)
    assert triage_fields(kept) == ("w1", "r1", "invoke_llm", 3)
    assert kept.request["request_id"] == REQUEST_ID
    assert kept.last_error == f"LlmMalformedReply: {REDACTED}"
    assert [(e.event, e.reviewer, e.review_round) for e in kept.history] == [("reedit", "ann", 1)]
