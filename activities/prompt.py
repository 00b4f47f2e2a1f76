"""The prompt source: loads the request's input (inline, ``file://`` or ``s3://``) and builds
the prompt from the template.

References are resolved here, in activities, so a large document never enters workflow history:
``fetch_prompt`` checks the reference and records it; ``invoke_llm`` loads it again when it builds
the messages.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from temporalio import activity
from temporalio.exceptions import ApplicationError

from aiorch.config import Settings
from workflows import contract, errors
from workflows.payloads import PipelineRequest, PromptInput, PromptPlan, ReviewMode

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MAX_INPUT_BYTES = 20 * 1024 * 1024

SYSTEM_PROMPT = (
    "You are a careful assistant inside an automated pipeline. Answer the user's request. "
    'Reply with ONLY a JSON object of the form {"content": string, "needs_review": boolean} '
    "and nothing else: no Markdown, no code fences. Set needs_review to true when a human "
    "should check the answer before it is used (uncertain facts, sensitive or risky content)."
)
CORRECTIVE_INSTRUCTION = (
    "Your previous reply could not be used: it was not a single JSON object of the form "
    '{"content": string, "needs_review": boolean}. Reply again with only that JSON object.'
)


def context_suffix(metadata: dict[str, Any]) -> str:
    """The request's metadata as context after the message, or nothing when there is none."""
    if not metadata:
        return ""
    return "\n\nContext (JSON): " + json.dumps(metadata, sort_keys=True, ensure_ascii=False)


REVIEW_LEVELS: tuple[ReviewMode, ...] = ("never", "auto", "always")


def review_policy(
    settings: Settings, request: PipelineRequest
) -> tuple[ReviewMode, list[str] | None]:
    """The run's review level and reviewers: the operator's policy is the floor.

    A request may raise the level (``never`` < ``auto`` < ``always``) above ``REVIEW_MIN`` and
    narrow ``ALLOWED_REVIEWERS`` (to names it also allows; to any names when it allows anyone),
    never lower or widen them. ``None`` reviewers = anyone.

    Raises:
        ApplicationError: ``InvalidRequest`` when the request's reviewers leave nobody.
    """
    level = max(request.review, settings.review_min, key=REVIEW_LEVELS.index)
    operator, asked = settings.allowed_reviewers, request.options.allowed_reviewers
    if asked is None:
        return level, operator
    reviewers = [name for name in asked if operator is None or name in operator]
    if not reviewers:
        raise ApplicationError(
            "options.allowed_reviewers names nobody the operator allows (ALLOWED_REVIEWERS): "
            "a request may only narrow the set of reviewers",
            type=errors.INVALID_REQUEST,
            non_retryable=True,
        )
    return level, reviewers


def input_unavailable(reason: str) -> ApplicationError:
    return ApplicationError(reason, type=errors.INPUT_UNAVAILABLE, non_retryable=True)


class InputLoader:
    """Reads referenced inputs from files or S3, with a size limit."""

    def __init__(self, s3: S3Client | None = None, max_bytes: int = MAX_INPUT_BYTES) -> None:
        self._s3 = s3
        self._max_bytes = max_bytes

    async def load(self, reference: str) -> str:
        """The referenced document as text.

        Raises:
            ApplicationError: ``InputUnavailable`` (permanent) when it is missing, too large or
                not UTF-8 text.
        """
        parsed = urlparse(reference)
        if parsed.scheme == "file":
            data = await asyncio.to_thread(self._read_file, Path(unquote(parsed.path)))
        elif parsed.scheme == "s3":
            data = await asyncio.to_thread(self._read_s3, parsed.netloc, parsed.path.lstrip("/"))
        else:
            raise input_unavailable(f"unsupported reference scheme in {reference!r}")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise input_unavailable(f"{reference} is not UTF-8 text") from None

    def _read_file(self, path: Path) -> bytes:
        try:
            size = path.stat().st_size
        except OSError as err:
            raise input_unavailable(f"cannot read {path}: {err.strerror}") from None
        self._check_size(str(path), size)
        return path.read_bytes()

    def _read_s3(self, bucket: str, key: str) -> bytes:
        if self._s3 is None:
            raise input_unavailable("s3:// references need S3 configured (S3_ENDPOINT_URL/AWS)")
        try:
            head = self._s3.head_object(Bucket=bucket, Key=key)
        except self._s3.exceptions.ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchKey", "NoSuchBucket", "403"):
                raise input_unavailable(f"s3://{bucket}/{key} is not readable ({code})") from None
            raise
        self._check_size(f"s3://{bucket}/{key}", int(head["ContentLength"]))
        return self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()

    def _check_size(self, name: str, size: int) -> None:
        if size > self._max_bytes:
            raise input_unavailable(f"{name} is {size} bytes; the limit is {self._max_bytes} bytes")


class PromptActivities:
    """The ``fetch_prompt`` activity, with its loader and the worker's defaults injected."""

    def __init__(self, settings: Settings, loader: InputLoader) -> None:
        self._settings = settings
        self._loader = loader
        self._review_keys = settings.review_keys()

    @activity.defn(name=contract.ACTIVITY_FETCH_PROMPT)
    async def fetch_prompt(self, prompt_input: PromptInput) -> PromptPlan:
        """Validate the input, build the prompt and resolve every setting the run will use."""
        request = prompt_input.request
        input_ref: str | None = None
        if request.is_reference:
            input_ref = request.user_message
            await self._loader.load(input_ref)
            # The document is prepended by invoke_llm; only the context travels in history.
            user_prompt = context_suffix(request.metadata)
        else:
            user_prompt = request.user_message + context_suffix(request.metadata)
        return self._plan(request, user_prompt, input_ref)

    def _plan(
        self, request: PipelineRequest, user_prompt: str, input_ref: str | None
    ) -> PromptPlan:
        cfg, opts = self._settings, request.options
        review, reviewers = review_policy(cfg, request)
        return PromptPlan(
            system_prompt=SYSTEM_PROMPT,
            user_prompt=user_prompt,
            input_ref=input_ref,
            llm_timeout_s=cfg.llm_timeout_s,
            review_timeout_s=opts.review_timeout_s or cfg.review_timeout_s,
            escalation_timeout_s=opts.escalation_timeout_s or cfg.escalation_timeout_s,
            llm_max_attempts=opts.llm_max_attempts or cfg.llm_max_attempts,
            model=cfg.llm_model,
            fallback_model=cfg.llm_fallback_model,
            fallback_after=cfg.llm_fallback_after,
            temperature=cfg.llm_temperature,
            backoff_initial_s=cfg.llm_backoff_initial_s,
            backoff_max_s=cfg.llm_backoff_max_s,
            capture_content=cfg.otel_capture_content,
            review=review,
            allowed_reviewers=reviewers,
            requested_by=request.requested_by,
            review_keys=self._review_keys,
            max_feedback_chars=cfg.max_feedback_chars,
            max_reply_chars=cfg.max_reply_chars,
            reedit_rounds_per_run=cfg.reedit_rounds_per_run,
        )
