"""Human review: the least review a run gets, who may review, how long a run waits, and the
operator's review policies and groups."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from aiorch_runtime.config.section import SettingsSection, decode_json
from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.config_sources import split_list
from aiorch_runtime.errors import ConfigError
from aiorch_runtime.review_policies import PolicySpec, check_groups, check_policies, policy_for


class ReviewSettings(SettingsSection):
    """The operator's review floor and ceiling (`Section.REVIEW`)."""

    SECTION: ClassVar[Section] = Section.REVIEW

    review_min: Annotated[Literal["never", "auto", "always"], SettingDoc(Section.REVIEW)] = Field(
        default="auto",
        description="The least review any run gets: `never` < `auto` (when the model asks for "
        "it) < `always`; a request may only raise it.",
    )
    document_review_min: Annotated[
        Literal["never", "auto", "always"], SettingDoc(Section.REVIEW)
    ] = Field(
        default="always",
        description="The least review a document run gets (with `REVIEW_MIN`, the higher "
        "counts): the fields it stores are model output, which the document steers, so by "
        "default a person approves them; `auto` stores valid fields unreviewed.",
    )
    allowed_reviewers: Annotated[
        list[str] | None,
        NoDecode,
        SettingDoc(Section.REVIEW, default="unset (anyone)", example="alice,bob"),
    ] = Field(
        default=None,
        description="Who may review a run, comma-separated; a request may only narrow the set.",
    )
    review_timeout_s: Annotated[float, SettingDoc(Section.REVIEW)] = Field(
        default=24 * 3600.0,
        gt=0,
        description="How long a run waits for a review before it escalates (notified again); "
        "a request's options may only shorten it.",
    )
    escalation_timeout_s: Annotated[float, SettingDoc(Section.REVIEW)] = Field(
        default=24 * 3600.0,
        gt=0,
        description="How long an escalated run waits for a review before it is dead-lettered; "
        "a request's options may only shorten it.",
    )
    max_feedback_chars: Annotated[int, SettingDoc(Section.REVIEW)] = Field(
        default=4000,
        ge=1,
        le=16 * 1024,
        description="The longest feedback a review decision may carry; a longer one is refused.",
    )
    reedit_rounds_per_run: Annotated[int, SettingDoc(Section.REVIEW)] = Field(
        default=50,
        ge=1,
        le=1000,
        description="Review rounds after which a reedit loop continues as a new run, so its "
        "history stays small.",
    )

    review_policies: Annotated[
        dict[str, PolicySpec],
        NoDecode,
        SettingDoc(
            Section.REVIEW,
            default="unset (one decision from one allowed reviewer decides a round)",
            example='{"documents": {"stages": [{"group": "finance", "quorum": 2}]}}',
        ),
    ] = Field(
        default_factory=dict,
        description="Review policies per pipeline written in Python (`llm`, `documents`; a "
        "pipeline file sets its review steps' own) or per pipeline and tenant "
        "(`documents@acme`), JSON: stages (a group, its quorum, its deadline), the rejections "
        "that end a round, auto-approve rules "
        "([reviews.md](reviews.md)). Each run keeps the policy it was planned with.",
    )
    review_groups: Annotated[
        dict[str, list[str]],
        NoDecode,
        SettingDoc(
            Section.REVIEW, default="unset (no groups)", example='{"finance": ["alice", "bob"]}'
        ),
    ] = Field(
        default_factory=dict,
        description="The members of the review groups that policies name, JSON; a member must "
        "also be in `ALLOWED_REVIEWERS` (when set).",
    )

    _decode_review_json = field_validator("review_policies", "review_groups", mode="before")(
        decode_json
    )

    @field_validator("allowed_reviewers", mode="before")
    @classmethod
    def _split_reviewers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return split_list(value) or None
        return value

    @field_validator("review_groups")
    @classmethod
    def _review_groups(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        check_groups(value)
        return value

    @model_validator(mode="after")
    def _review_policies(self) -> Self:
        try:
            check_policies(self.review_policies, self.review_groups)
        except ValueError as err:
            raise ConfigError(f"REVIEW_POLICIES: {err}") from None
        return self

    def review_policy(self, pipeline: str, tenant: str) -> tuple[str, PolicySpec] | None:
        """The review policy of ``pipeline``'s runs for ``tenant`` (its key and itself), if the
        operator set one (REVIEW_POLICIES: the tenant's, else the pipeline's)."""
        return policy_for(self.review_policies, pipeline, tenant)
