"""The prompt source: loads the request's input (inline, ``file://`` or ``s3://``) and builds
the prompt from the template.

References are resolved here, in activities, so a large document never enters workflow history:
``fetch_prompt`` checks the reference and records it; ``invoke_llm`` loads it again when it builds
the messages. A reference is caller-chosen, so it resolves only inside what the operator allows
(``Settings.allowed_file_roots`` and ``Settings.allowed_s3_prefixes``), and every refusal reads
the same whether the target is missing or forbidden.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import stat
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urlparse

from botocore.exceptions import BotoCoreError, ClientError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.capacity import unbudgeted_tenant
from aiorch_runtime.config import DEFAULT_MAX_INPUT_BYTES, Settings
from aiorch_runtime.review_policies import PolicyUnmet, resolve
from workflows import contract, errors
from workflows.engine.identity import start_claim_problem
from workflows.payloads import (
    DEFAULT_TENANT,
    PipelineRequest,
    PromptInput,
    PromptPlan,
    RequestBase,
    ReviewKey,
    ReviewMode,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

# Error text quotes at most this much of a reference (references are caller-chosen).
MAX_SHOWN_REFERENCE = 120
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the check opens at once instead of waiting for a writer.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# The worker's own trouble, not the file's: worth another attempt.
_TRANSIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
_TRANSIENT_S3_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    }
)
_READ_CHUNK = 1024 * 1024
Limit = TypeVar("Limit", int, float)
# A batched call waits for its group's delay (LLM_BATCH_DELAY_S), then this long at most for the
# submission itself (a large file's upload, a provider briefly down), before its run retries.
BATCH_SUBMISSION_ALLOWANCE_S = 1800.0

SYSTEM_PROMPT = (
    "You are a careful assistant inside an automated pipeline. Answer the user's request. "
    'Reply with ONLY a JSON object of the form {"content": string, "needs_review": boolean} '
    "and nothing else: no Markdown, no code fences. Set needs_review to true when a human "
    "should check the answer before it is used (uncertain facts, sensitive or risky content). "
    'You may add "confidence": a number from 0 to 1, how sure you are that the answer is right.'
)
CORRECTIVE_INSTRUCTION = (
    "Your previous reply could not be used: it was not a single JSON object of the form "
    '{"content": string, "needs_review": boolean}. Reply again with only that JSON object.'
)
OBJECT_CORRECTIVE_INSTRUCTION = (
    "Your previous reply could not be used: it was not a single JSON object. Reply again with "
    "only the JSON object the instructions describe: no Markdown, no code fences."
)


def context_suffix(metadata: dict[str, Any]) -> str:
    """The request's metadata as context after the message, or nothing when there is none."""
    if not metadata:
        return ""
    return "\n\nContext (JSON): " + json.dumps(metadata, sort_keys=True, ensure_ascii=False)


REVIEW_LEVELS: tuple[ReviewMode, ...] = ("never", "auto", "always")


def review_policy(settings: Settings, request: RequestBase) -> tuple[ReviewMode, list[str] | None]:
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


def shown_reference(reference: str) -> str:
    """The reference as error text shows it: printable characters only, shortened."""
    printable = "".join(c if c.isprintable() else "?" for c in reference[: MAX_SHOWN_REFERENCE + 1])
    if len(printable) > MAX_SHOWN_REFERENCE:
        return printable[: MAX_SHOWN_REFERENCE - 3] + "..."
    return printable


def not_available(reference: str) -> ApplicationError:
    """The one error for a reference that is missing, outside the roots, not a regular file or
    not readable: the same text for each, so an error never tells whether something exists."""
    return input_unavailable(
        f"input {shown_reference(reference)} is not available (missing or not allowed)"
    )


def s3_prefix_allows(entry: str, bucket: str, key: str) -> bool:
    """Whether the ``bucket/prefix`` entry covers ``key`` in ``bucket``.

    A prefix is a folder: ``docs/public`` covers ``docs/public/a.txt``, never
    ``docs/public-internal/a.txt``; a bare ``bucket`` (or ``bucket/``) covers the whole bucket.
    """
    entry_bucket, _, prefix = entry.partition("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket == entry_bucket and key.startswith(prefix)


class InputLoader:
    """Reads referenced inputs, only from the roots the operator allows, with a size limit.

    ``file://`` paths must resolve (symlinks and ``..`` followed) inside one of ``file_roots``
    and name a regular file; ``s3://`` objects must lie under one of ``s3_prefixes``
    (``bucket/prefix``). With no roots and no prefixes, every reference is refused. Reads stop
    after ``max_bytes + 1`` bytes whatever ``stat`` or ``Content-Length`` claim, because
    ``/proc`` files and devices report a size of 0.
    """

    def __init__(
        self,
        s3: S3Client | None = None,
        max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        *,
        file_roots: Sequence[Path] = (),
        s3_prefixes: Sequence[str] = (),
    ) -> None:
        self._s3 = s3
        self._max_bytes = max_bytes
        self._file_roots = [os.path.realpath(root) for root in file_roots]
        self._s3_prefixes = list(s3_prefixes)
        self._pseudo_devices = pseudo_file_systems()

    async def load(self, reference: str) -> str:
        """The referenced document as text.

        Raises:
            ApplicationError: as `load_bytes`, and ``InputUnavailable`` when it is not UTF-8
                text.
        """
        data = await self.load_bytes(reference)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise input_unavailable(
                f"input {shown_reference(reference)} is not UTF-8 text"
            ) from None

    async def load_bytes(self, reference: str) -> bytes:
        """The referenced document's bytes, whatever they hold (a PDF, text in any encoding).

        Raises:
            ApplicationError: ``InputUnavailable`` (permanent) when it is missing, not allowed
                or too large; ``InputFetchFailed`` (retryable) when S3 failed for a passing
                reason (throttling, 5xx, timeouts).
        """
        if reference.startswith("file://"):
            return await asyncio.to_thread(self._read_file, reference)
        if reference.startswith("s3://"):
            return await asyncio.to_thread(self._read_s3, reference)
        raise not_available(reference)

    # ------------------------------------------------------------------------------- files

    def _read_file(self, reference: str) -> bytes:
        parsed = urlparse(reference)
        path = unquote(parsed.path)
        if (
            parsed.netloc not in ("", "localhost")
            or parsed.params
            or parsed.query
            or parsed.fragment
            or not path.startswith("/")
            or "\0" in path
            or ".." in path.split("/")
        ):
            raise _refused(reference, "not a plain absolute file:// path")
        try:
            target = os.path.realpath(path)
            for root in self._file_roots:
                inside = os.path.relpath(target, root)
                if inside != os.curdir and inside.split(os.sep)[0] != os.pardir:
                    return self._read_under(reference, root, inside.split(os.sep))
        except (OSError, ValueError):  # ValueError: not encodable as a file name
            raise _refused(reference, "cannot resolve the path") from None
        raise _refused(reference, "outside INPUT_FILE_ROOTS/CLAIM_CHECK_DIR")

    def _read_under(self, reference: str, root: str, parts: list[str]) -> bytes:
        """Open ``root/parts...`` one component at a time, following no symlink, so a path
        changed after ``realpath`` (a directory swapped for a link) cannot lead out of the root;
        the checked file is the read one (``fstat`` of the opened descriptor)."""
        try:
            directory = os.open(root, _DIRECTORY_FLAGS)
            try:
                for part in parts[:-1]:
                    inner = os.open(part, _DIRECTORY_FLAGS, dir_fd=directory)
                    os.close(directory)
                    directory = inner
                # Refused before opening: opening a device or FIFO may block or act.
                self._check_regular(
                    reference, os.stat(parts[-1], dir_fd=directory, follow_symlinks=False)
                )
                fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=directory)
            finally:
                os.close(directory)
        except OSError as err:
            if err.errno in _TRANSIENT_ERRNOS:
                raise _fetch_failed(reference, "the worker is short of resources") from None
            raise _refused(reference, "cannot open it") from None
        try:
            self._check_regular(reference, os.fstat(fd))
            return self._bounded(reference, _read_fd(fd, self._max_bytes + 1))
        except OSError:
            raise _fetch_failed(reference, "reading it failed") from None
        finally:
            os.close(fd)

    def _check_regular(self, reference: str, status: os.stat_result) -> None:
        # /proc and /sys files claim to be regular files; their file system gives them away.
        if not stat.S_ISREG(status.st_mode) or status.st_dev in self._pseudo_devices:
            raise _refused(reference, "not a regular file")

    # ---------------------------------------------------------------------------------- S3

    def _read_s3(self, reference: str) -> bytes:
        # No URL decoding: a key is taken literally, so %2e%2e stays harmless text.
        bucket, _, key = reference.removeprefix("s3://").partition("/")
        # A key ending in "/" is a folder marker, never a document.
        if not key or key.endswith("/") or ".." in key.split("/"):
            raise _refused(reference, "not s3://bucket/key")
        if not any(s3_prefix_allows(entry, bucket, key) for entry in self._s3_prefixes):
            raise _refused(reference, "outside INPUT_S3_PREFIXES and the claim-check prefix")
        if self._s3 is None:
            raise input_unavailable("s3:// references need S3 configured (S3_ENDPOINT_URL/AWS)")
        try:
            # The range asks for one byte more than the limit, so "too large" needs no HEAD and
            # never trusts Content-Length; read() is bounded too, for stores that ignore Range.
            response = self._s3.get_object(
                Bucket=bucket, Key=key, Range=f"bytes=0-{self._max_bytes}"
            )
            body = response["Body"]
            try:
                data = body.read(self._max_bytes + 1)
            finally:
                body.close()
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
            if code == "InvalidRange":  # an empty object has no byte 0
                return b""
            if status >= 500 or status in (408, 429) or code in _TRANSIENT_S3_CODES:
                raise _fetch_failed(reference, f"S3 answered {code or status}") from None
            # 403 and 404 alike, and every other refusal: the caller learns nothing.
            raise _refused(reference, f"S3 answered {code or status}") from None
        except BotoCoreError as err:
            raise _fetch_failed(reference, type(err).__name__) from None
        return self._bounded(reference, data)

    def _bounded(self, reference: str, data: bytes) -> bytes:
        if len(data) > self._max_bytes:
            raise input_unavailable(
                f"input {shown_reference(reference)} is larger than the limit of "
                f"{self._max_bytes} bytes (MAX_INPUT_BYTES)"
            )
        return data


def pseudo_file_systems() -> frozenset[int]:
    """The devices of ``/proc``, ``/sys`` and ``/dev``, where a "regular file" is the kernel's
    state (``/proc/self/environ``) rather than a document; each counts only when it is a mount
    of its own, so a system without them refuses nothing else."""
    try:
        system = os.stat("/").st_dev
    except OSError:
        return frozenset()
    devices: set[int] = set()
    for mount in ("/proc", "/sys", "/dev"):
        try:
            device = os.stat(mount).st_dev
        except OSError:
            continue
        if device != system:
            devices.add(device)
    return frozenset(devices)


def _read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd``, reading until EOF or the limit."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, _READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _refused(reference: str, why: str) -> ApplicationError:
    # The reason goes to the worker's log for the operator (no caller text in it); the caller
    # gets the one uniform message.
    _log().info("input refused: %s", why)
    return not_available(reference)


def _fetch_failed(reference: str, why: str) -> ApplicationError:
    return ApplicationError(
        f"input {shown_reference(reference)} could not be fetched ({why}); it will be retried",
        type=errors.INPUT_FETCH_FAILED,
    )


def _log() -> logging.LoggerAdapter[logging.Logger] | logging.Logger:
    # The activity logger adds the workflow and activity ids, when there is an activity.
    return activity.logger if activity.in_activity() else logging.getLogger(__name__)


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
        return planned(
            PromptPlan,
            self._settings,
            request,
            self._review_keys,
            pipeline_name=contract.PIPELINE_LLM,
            system_prompt=SYSTEM_PROMPT,
            user_prompt=user_prompt,
            input_ref=input_ref,
        )


P = TypeVar("P", bound=PromptPlan)


def planned(
    plan_type: type[P],
    settings: Settings,
    request: RequestBase,
    review_keys: list[ReviewKey],
    *,
    pipeline_name: str,
    **prompt: Any,
) -> P:
    """A run's plan (a ``plan_type``) for a run of ``pipeline_name`` (its short name, which
    picks its review policy): its ``prompt``
    fields, with every setting the run will use resolved once from the worker's configuration
    and the request.

    Raises:
        ApplicationError: ``InvalidRequest`` when the request's reviewers leave nobody, or fewer
            than the pipeline's review policy needs.
    """
    cfg, opts = settings, request.options
    review, reviewers = review_policy(cfg, request)
    requested_by, tenant = requester(cfg, request)
    refused = unbudgeted_tenant(tenant, cfg.tenant_budget(tenant), cfg.tenant_budgeted)
    if refused is not None:
        raise ApplicationError(refused, type=errors.INVALID_REQUEST, non_retryable=True)
    try:
        reviewed = resolve(
            cfg.review_policy(pipeline_name, tenant),
            cfg.review_groups,
            allowed=reviewers,
            requested_by=request.requested_by,
            review_timeout_s=cfg.review_timeout_s,
            escalation_timeout_s=cfg.escalation_timeout_s,
            asked_review_timeout_s=opts.review_timeout_s,
            asked_escalation_timeout_s=opts.escalation_timeout_s,
        )
    except PolicyUnmet as err:
        raise ApplicationError(str(err), type=errors.INVALID_REQUEST, non_retryable=True) from None
    return plan_type(
        **prompt,
        # The LLM calls (a request may lower its attempts).
        model=cfg.llm_model,
        temperature=cfg.llm_temperature,
        llm_max_attempts=lowered(cfg.llm_max_attempts, opts.llm_max_attempts),
        fallback_model=cfg.llm_fallback_model,
        fallback_after=cfg.llm_fallback_after,
        llm_timeout_s=cfg.llm_timeout_s,
        backoff_initial_s=cfg.llm_backoff_initial_s,
        backoff_max_s=cfg.llm_backoff_max_s,
        max_reply_chars=cfg.max_reply_chars,
        # Review: the operator's policy as the floor, its timeouts as the ceiling.
        review=review,
        allowed_reviewers=reviewers,
        requested_by=requested_by,
        review_keys=review_keys,
        review_token_binds_run=True,
        budget_decisions_signed=True,
        quorum_counts_keys=True,
        review_token_ttl_s=cfg.review_token_ttl_s,
        review_timeout_s=reviewed.review_timeout_s,
        escalation_timeout_s=reviewed.escalation_timeout_s,
        **reviewed.plan_fields(),
        max_feedback_chars=cfg.max_feedback_chars,
        reedit_rounds_per_run=cfg.reedit_rounds_per_run,
        notify=cfg.notifications_enabled,
        capture_content=cfg.otel_capture_content,
        # Budgets: the operator's ceiling, lowered (never raised) by the request.
        tenant=tenant,
        budget_usd=run_budget(cfg.run_budget_usd, opts.max_cost_usd),
        budget_policy=cfg.budget_policy,
        budget_timeout_s=cfg.budget_decision_timeout_s,
        **model_cost(cfg, request),
    )


def requester(settings: Settings, request: RequestBase) -> tuple[str | None, str]:
    """Who asked for the run and whose budget it spends: with start authentication on
    (``REQUESTER_PUBLIC_KEYS``), the requester whose key signed the request's start claim for
    this run's pipeline and namespace (the activity's caller) and that key's tenant; off, what
    the request says.

    Raises:
        ApplicationError: ``InvalidRequest`` when the start claim does not vouch for the request,
            or the request names another requester or tenant than the key's.
    """
    keys = settings.requester_keys()
    if not keys:
        return request.requested_by, request.tenant or DEFAULT_TENANT
    info = activity.info()
    found = start_claim_problem(
        request,
        keys=keys,
        workflow_type=info.workflow_type or "",
        namespace=info.workflow_namespace or info.namespace,
        now=datetime.now(UTC),
    )
    if isinstance(found, str):
        raise ApplicationError(found, type=errors.INVALID_REQUEST, non_retryable=True)
    if request.requested_by not in (None, found.key_id):
        raise ApplicationError(
            "requested_by names another requester than the one whose key signed the start",
            type=errors.INVALID_REQUEST,
            non_retryable=True,
        )
    if request.tenant not in (None, found.tenant):
        raise ApplicationError(
            f"tenant {request.tenant!r} is not the tenant of the key that signed the start",
            type=errors.INVALID_REQUEST,
            non_retryable=True,
        )
    return found.key_id, found.tenant


def model_cost(settings: Settings, request: RequestBase) -> dict[str, Any]:
    """How a run's model calls are made (docs/cost.md): the lane (the request's, else
    ``LLM_BATCH``'s default), how long a batched call waits for its submission and for its
    answer, and whether the result cache may answer them (``LLM_RESULT_CACHE_TTL_S``, unless
    the request says no).

    Raises:
        ApplicationError: ``InvalidRequest`` when the request asks for the batch lane and the
            deployment has none.
    """
    asked = request.options.lane
    if asked == "batch" and not settings.batch_enabled:
        raise ApplicationError(
            "options.lane is batch, and this deployment does not use the provider's batch API "
            "(LLM_BATCH=off): leave the lane out, or ask for sync",
            type=errors.INVALID_REQUEST,
            non_retryable=True,
        )
    return {
        "lane": asked or ("batch" if settings.llm_batch == "default" else "sync"),
        "batch_queue_s": settings.llm_batch_delay_s + BATCH_SUBMISSION_ALLOWANCE_S,
        "batch_wait_s": settings.llm_batch_wait_s,
        "result_cache": settings.result_cache_on and request.options.result_cache is not False,
    }


def lowered(operator: Limit, requested: Limit | None) -> Limit:
    """The operator's limit, or the request's when it is lower: a request (which anyone who may
    start a run writes) may only lower the operator's limits, never raise them."""
    return operator if requested is None else min(operator, requested)


def run_budget(operator: float | None, requested: float | None) -> float | None:
    """A run's cost ceiling: ``RUN_BUDGET_USD`` lowered by ``options.max_cost_usd`` (without
    an operator's ceiling, the request's, if any)."""
    return requested if operator is None else lowered(operator, requested)
