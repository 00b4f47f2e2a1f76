"""Payload models: the wire contract's validation rules and schemas."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from workflows.contract_payloads import ALL_MODELS
from workflows.payloads import (
    HistoryEntry,
    LlmReply,
    PipelineRequest,
    ReviewDecision,
    describe_validation_error,
)

VALID_ID = "0123456789abcdef01234567"


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def error_fields(err: ValidationError) -> set[str]:
    return {".".join(str(p) for p in item["loc"]) for item in err.errors()}


def test_valid_request_gets_defaults() -> None:
    """A minimal request is accepted with review auto, no metadata and empty options."""
    request = PipelineRequest.model_validate({"request_id": VALID_ID, "user_message": "hi"})
    assert request.review == "auto"
    assert request.metadata == {}
    assert request.options.review_timeout_s is None


@pytest.mark.parametrize(
    "bad_id", ["", "0123456789ABCDEF01234567", "0123456789abcdef0123456", "g" * 24, VALID_ID + "0"]
)
def test_bad_request_id_is_rejected_naming_the_field(bad_id: str) -> None:
    """request_id must be 24 lowercase hex characters; the error names request_id."""
    with pytest.raises(ValidationError) as info:
        PipelineRequest.model_validate({"request_id": bad_id, "user_message": "hi"})
    assert error_fields(info.value) == {"request_id"}
    assert "request_id" in describe_validation_error(info.value)


def test_unknown_field_is_rejected_naming_the_field() -> None:
    """extra='forbid': a typo is an error that names the unknown field."""
    with pytest.raises(ValidationError) as info:
        PipelineRequest.model_validate(
            {"request_id": VALID_ID, "user_message": "hi", "reveiw": "always"}
        )
    assert error_fields(info.value) == {"reveiw"}


@pytest.mark.parametrize("message", ["", "   ", "\n\t"])
def test_empty_message_is_rejected_naming_the_field(message: str) -> None:
    """An empty or blank user_message is refused with the field named."""
    with pytest.raises(ValidationError) as info:
        PipelineRequest.model_validate({"request_id": VALID_ID, "user_message": message})
    assert error_fields(info.value) == {"user_message"}


def test_invalid_options_are_rejected() -> None:
    """Options are validated too: unknown option, non-positive timeout, zero attempts."""
    for options, field in [
        ({"retries": 3}, "options.retries"),
        ({"review_timeout_s": 0}, "options.review_timeout_s"),
        ({"llm_max_attempts": 0}, "options.llm_max_attempts"),
    ]:
        with pytest.raises(ValidationError) as info:
            PipelineRequest.model_validate(
                {"request_id": VALID_ID, "user_message": "x", "options": options}
            )
        assert error_fields(info.value) == {field}


def test_review_decision_rules() -> None:
    """A review needs a known decision and a non-blank reviewer; feedback is optional."""
    ok = ReviewDecision.model_validate({"decision": "reedit", "reviewer": "ann", "feedback": "x"})
    assert ok.decision == "reedit"
    with pytest.raises(ValidationError):
        ReviewDecision.model_validate({"decision": "maybe", "reviewer": "ann"})
    with pytest.raises(ValidationError):
        ReviewDecision.model_validate({"decision": "approve", "reviewer": " "})


def test_llm_reply_is_strict() -> None:
    """The LLM reply must be exactly {content, needs_review}."""
    assert LlmReply.model_validate({"content": "a", "needs_review": False}).content == "a"
    with pytest.raises(ValidationError):
        LlmReply.model_validate({"content": "a"})
    with pytest.raises(ValidationError):
        LlmReply.model_validate({"content": "a", "needs_review": False, "extra": 1})


def test_history_entry_serialises_time_as_iso_utc() -> None:
    """History entries carry ISO-8601 UTC timestamps on the wire."""
    entry = HistoryEntry(
        from_state="idle",
        to_state="fetch_prompt",
        event="start",
        at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    assert entry.model_dump(mode="json")["at"] == "2026-01-02T03:04:05Z"


def test_every_model_has_a_json_schema() -> None:
    """Each contract payload exports a JSON schema with its fields."""
    for model in ALL_MODELS:
        schema = model.model_json_schema()
        assert schema["type"] == "object"
        assert set(schema["properties"]) == set(model.model_fields)
    assert PipelineRequest.model_json_schema()["additionalProperties"] is False


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"user_message": "hi \ud800"}, "user_message"),
        ({"metadata": {"k": "\udfff"}}, "metadata"),
        ({"requested_by": "\ud83d"}, "requested_by"),
        ({"metadata": {"a": nested(20)}}, "metadata"),
    ],
    ids=["message", "metadata-text", "requester", "metadata-depth"],
)
def test_text_a_client_sends_must_be_valid_unicode_and_metadata_shallow(
    fields: dict[str, object], field: str
) -> None:
    """Lone surrogates (which no payload could carry onwards) and deeply nested metadata are
    refused at the boundary, naming the field and never quoting the value."""
    with pytest.raises(ValidationError) as info:
        PipelineRequest.model_validate({"request_id": "a" * 24, "user_message": "x", **fields})
    line = describe_validation_error(info.value)
    assert line.startswith(f"{field}")
    assert "\\ud" not in line and "\ud800" not in line
    line.encode("utf-8")  # the message itself is always encodable


def test_validation_messages_never_carry_what_they_cannot_encode() -> None:
    """A field name a client made up with a lone surrogate still gives an encodable line."""
    with pytest.raises(ValidationError) as info:
        PipelineRequest.model_validate(
            {"request_id": "a" * 24, "user_message": "x", "\ud800" * 500: 1}
        )
    line = describe_validation_error(info.value)
    line.encode("utf-8")
    assert line.startswith("(payload): ") and len(line) < 400
    with pytest.raises(ValidationError) as info:
        PipelineRequest.model_validate({"request_id": "a" * 24, "user_message": "x", "k" * 500: 1})
    line = describe_validation_error(info.value)
    assert "Extra inputs are not permitted" in line and len(line) < 400


def test_tenant_and_cost_ceiling_are_validated() -> None:
    """A request may name a plain tenant and a positive cost ceiling; anything else is refused
    before the run starts."""
    from pydantic import ValidationError as PydanticValidationError

    from workflows.payloads import PipelineRequest

    base = {"request_id": "0123456789abcdef01234567", "user_message": "hi"}
    ok = PipelineRequest.model_validate(
        {**base, "tenant": "acme-eu.1", "options": {"max_cost_usd": 0.5}}
    )
    assert (ok.tenant, ok.options.max_cost_usd) == ("acme-eu.1", 0.5)
    for bad in ({"tenant": "a b"}, {"tenant": "x" * 65}, {"options": {"max_cost_usd": 0}}):
        with pytest.raises(PydanticValidationError):
            PipelineRequest.model_validate({**base, **bad})
