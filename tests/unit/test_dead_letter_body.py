"""Dead-letter bodies are ASCII-only JSON, stay under SQS's size limit and say what was cut or
reduced."""

from __future__ import annotations

import json

from activities.dead_letter import MAX_BODY_BYTES, dedup_key, fit_body, reduced_body
from tests.support.builders import REQUEST_ID, dead_letter, history_entry, triage_fields
from workflows.payloads import DeadLetterMessage


def message(text_size: int, history: int, error_size: int = 10) -> DeadLetterMessage:
    entry = history_entry("invoke_llm", "retry_llm", "retryable_error", attempt=1, detail="x" * 500)
    return dead_letter(
        "m" * text_size, attempts=5, last_error="e" * error_size, history=[entry] * history
    )


def test_small_message_is_sent_whole() -> None:
    """Under the limit nothing is changed."""
    small = message(100, 3)
    assert json.loads(fit_body(small)) == json.loads(small.model_dump_json())


def test_huge_message_is_cut_and_marked() -> None:
    """A 1 MB request, long errors and a long history still fit, and the cut is stated."""
    body = fit_body(message(1_000_000, 2000, error_size=100_000))
    assert len(body.encode()) <= MAX_BODY_BYTES
    decoded = json.loads(body)
    assert "cut" in decoded["request"]["truncated"]
    assert decoded["workflow_id"] == "w1"
    assert decoded["last_error"].endswith("[cut]")


def test_dedup_key_is_workflow_and_run() -> None:
    """The deduplication key names the exact run."""
    assert dedup_key(message(1, 0)) == "w1:r1"


# Characters SQS refuses (outside #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
# #x10000-#x10FFFF) and others that are easy to get wrong: noncharacters, C0 controls, NUL,
# non-BMP (emoji, musical symbols), line/paragraph separators, bidi marks, a BOM, DEL.
ODD_TEXT = 'a\ufffeb\uffffc\x00\x01\x1f\x7f\U0001f600\U0001d11e\u2028\u2029\u200f\ufeff\\"/'


def odd_message(text: str = ODD_TEXT) -> DeadLetterMessage:
    return dead_letter(
        request={"request_id": REQUEST_ID, "user_message": text, "metadata": {text: [text]}},
        attempts=2,
        last_error=f"LlmMalformedReply: reply is not JSON: {text}",
        history=[history_entry("await_review", "invoke_llm", "reedit", feedback=text)],
    )


def test_body_is_ascii_json_that_decodes_to_the_same_message() -> None:
    """U+FFFE, U+FFFF, controls and non-BMP characters leave as JSON escapes: the body is pure
    ASCII, valid JSON, and decodes (json and pydantic alike) to the original message."""
    original = odd_message()
    body = fit_body(original)

    assert body.isascii()
    assert "\\ufffe" in body and "\\uffff" in body and "\\ud83d\\ude00" in body
    assert DeadLetterMessage.model_validate_json(body) == original
    assert DeadLetterMessage.model_validate(json.loads(body)) == original


def test_lone_surrogates_become_replacement_characters() -> None:
    """A lone surrogate (no UTF-8 text can hold one) becomes U+FFFD, so strict JSON decoders
    still read the body; the rest of the message is unchanged."""
    body = fit_body(odd_message("x\ud800y\udfffz"))

    assert body.isascii()
    decoded = DeadLetterMessage.model_validate_json(body)
    assert decoded.request["user_message"] == "x\ufffdy\ufffdz"
    assert decoded.workflow_id == "w1"


def test_size_is_measured_on_the_ascii_form() -> None:
    """60,000 emoji are 240 KB as UTF-8 (under the limit) but 720 KB escaped: the body is cut
    until its ASCII form fits, and says so."""
    message = odd_message("").model_copy(
        update={"request": {"request_id": REQUEST_ID, "user_message": "\U0001f600" * 60_000}}
    )
    assert len(message.model_dump_json().encode()) < MAX_BODY_BYTES

    body = fit_body(message)

    assert body.isascii()
    assert len(body) <= MAX_BODY_BYTES
    assert "cut from 60000 characters" in json.loads(body)["request"]["truncated"]


def test_reduced_body_keeps_ids_and_error_type_and_says_why() -> None:
    """The reduced form keeps what triage and redrive need (ids, run, failed state, attempts,
    the error's type), carries no content, and states that and why it was reduced."""
    body = reduced_body(odd_message("secret text \ufffe"), "InvalidMessageContents: bad char")

    assert body.isascii()
    assert "secret text" not in body
    reduced = DeadLetterMessage.model_validate_json(body)
    assert triage_fields(reduced) == ("w1", "r1", "invoke_llm", 2)
    assert reduced.last_error == "LlmMalformedReply"
    assert reduced.history == []
    assert reduced.request["request_id"] == REQUEST_ID
    assert "InvalidMessageContents: bad char" in reduced.request["reduced"]
