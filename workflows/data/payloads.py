"""What a pipeline defined as data passes: its request, plan, state and result, and the
payloads of its own activities.

Recorded in history, so versioned like the rest of the contract: new fields get defaults, and
readers ignore fields they do not know.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from workflows.data.spec import PipelineRecord
from workflows.payloads import (
    MAX_INLINE_MESSAGE_BYTES,
    MAX_METADATA_DEPTH,
    PromptPlan,
    RequestBase,
    RunCore,
    RunResult,
    printable,
)
from workflows.payloads._base import _depth
from workflows.steps.document_payloads import Problem, StoreReceipt

MAX_INPUT_BYTES: Final = MAX_INLINE_MESSAGE_BYTES


def _input_bounds(value: dict[str, Any]) -> dict[str, Any]:
    if _depth(value, MAX_METADATA_DEPTH) > MAX_METADATA_DEPTH:
        raise ValueError(f"nests deeper than {MAX_METADATA_DEPTH} levels")
    try:
        size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError):
        raise ValueError("is not JSON text (or holds a lone surrogate)") from None
    if size > MAX_INPUT_BYTES:
        raise ValueError(
            f"is {size} bytes as JSON; the limit is {MAX_INPUT_BYTES} bytes: pass a large "
            "document by reference (file:// or s3://) in a field the pipeline extracts"
        )
    return value


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class DataRequest(RequestBase):
    """A run of a pipeline defined as data: the input object its file's input schema describes
    (checked against the version the run starts with), and what every request holds."""

    input: Annotated[dict[str, Any], AfterValidator(_input_bounds)] = Field(
        default_factory=dict,
        description="The pipeline's input, as its file's input schema describes it",
    )

    def describe(self) -> str:
        """The request id and the start of its input (as JSON)."""
        shown = json.dumps(self.input, ensure_ascii=False, sort_keys=True)
        return f"request {self.request_id}: {printable(shown, 200)}"


class ReviewPolicy(_Payload):
    """A review step's policy as the run's plan settled it: its timeouts (the step's, else the
    worker's, lowered by the request's options) and who may review (narrowed by the step)."""

    review_timeout_s: float
    escalation_timeout_s: float
    allowed_reviewers: list[str] | None = None


class DataPlan(PromptPlan):
    """What ``plan_pipeline`` settles once, at the run's start: the pipeline's version (its
    file's text, hash and spec), every setting the run will use, and each review step's policy.
    The prompt fields are each model call's own, rendered when the step runs."""

    pipeline: PipelineRecord
    reviews: dict[str, ReviewPolicy] = Field(default_factory=dict)
    # The SHA-256 of the input as canonical JSON: what a stored row says it came from.
    input_digest: str = ""


class PlanPipelineInput(_Payload):
    """Input of ``plan_pipeline``: the pipeline's name (the run's workflow type) and the start
    input as the client sent it (the activity validates it against the pipeline's version)."""

    pipeline: str
    request: dict[str, Any]


class DataState(RunCore[DataPlan]):
    """A run of a pipeline defined as data: the engine's state, each step's output by step id,
    what the last validation found, who approved, and what was stored."""

    outputs: dict[str, Any] = Field(default_factory=dict)
    problems: list[Problem] = Field(default_factory=list)
    reviewed_by: str | None = None
    was_corrected: bool = False
    stored: StoreReceipt | None = None
    embedding_id: str | None = None


class DataResult(RunResult):
    """What a run of a pipeline defined as data returns: the pipeline and its version, each
    step's output, the last validation's problems, who approved, and when it was stored."""

    pipeline: str
    version: str
    outputs: dict[str, Any] = Field(default_factory=dict)
    problems: list[Problem] = Field(default_factory=list)
    reviewed_by: str | None = None
    corrected: bool = False
    stored_at: datetime | None = None
    embedding_id: str | None = None


class PipelineNotice(_Payload):
    """Input of ``notify_pipeline``: a notify step was reached. Ids and the file's own text
    only, never the run's content: the webhook's receiver is outside the payload codec."""

    workflow_id: str
    run_id: str
    pipeline: str
    version: str
    step: str
    message: str
