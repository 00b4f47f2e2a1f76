"""Names that other tools and live histories rely on. Renaming any of them breaks running
workflows or users' scripts, so they live in one place and never change."""

from __future__ import annotations

from typing import Final

from temporalio.common import SearchAttributeKey

WORKFLOW_TYPE: Final = "AiOrchestrator"
# The LLM pipeline's short name (``--pipeline llm``, REVIEW_POLICIES keys).
PIPELINE_LLM: Final = "llm"
DEFAULT_TASK_QUEUE: Final = "ai-orchestrator"

SIGNAL_REVIEW: Final = "review"
UPDATE_SUBMIT_REVIEW: Final = "submit_review"
# Operator actions on runs stuck in a review state (``starter.py stuck --action ...``).
SIGNAL_EXPIRE_REVIEW: Final = "expire_review"
SIGNAL_DEAD_LETTER: Final = "dead_letter"
# An operator's decision on a run waiting in await_budget (approve the overspend or reject).
SIGNAL_BUDGET_DECISION: Final = "budget_decision"
UPDATE_DECIDE_BUDGET: Final = "decide_budget"
# Every signal and update the workflow takes (what the Web UI lists for them).
# An operator's revocation of reviewer keys or reviewers, for a run planned while they were
# trusted (``aiorch keys revoke`` sends it to every open run).
SIGNAL_REVOKE: Final = "revoke"
SIGNALS: Final = (
    SIGNAL_REVIEW,
    SIGNAL_BUDGET_DECISION,
    SIGNAL_EXPIRE_REVIEW,
    SIGNAL_DEAD_LETTER,
    SIGNAL_REVOKE,
)
UPDATES: Final = (UPDATE_SUBMIT_REVIEW, UPDATE_DECIDE_BUDGET)
QUERY_STATE: Final = "state"
QUERY_STATUS: Final = "status"
# What a reviewer sees of a run, as its pipeline shows it (the review inbox asks it).
QUERY_REVIEW_VIEW: Final = "review_view"

SEARCH_ATTRIBUTE_STATE: Final = "AiState"
SEARCH_ATTRIBUTE_STATE_SINCE: Final = "AiStateSince"
# The review round a run waits on, so a reviewer signs for it without a (billed) query.
SEARCH_ATTRIBUTE_REVIEW_ROUND: Final = "AiReviewRound"
# The version of a pipeline defined as data a run follows (``VERSION@SHA256-PREFIX``).
SEARCH_ATTRIBUTE_PIPELINE_VERSION: Final = "AiPipelineVersion"
AI_STATE: Final = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_STATE)
AI_STATE_SINCE: Final = SearchAttributeKey.for_datetime(SEARCH_ATTRIBUTE_STATE_SINCE)
AI_REVIEW_ROUND: Final = SearchAttributeKey.for_int(SEARCH_ATTRIBUTE_REVIEW_ROUND)
AI_PIPELINE_VERSION: Final = SearchAttributeKey.for_keyword(SEARCH_ATTRIBUTE_PIPELINE_VERSION)

ACTIVITY_FETCH_PROMPT: Final = "fetch_prompt"
# Any pipeline's plan (a local activity): the run's policy and model settings.
ACTIVITY_PLAN_RUN: Final = "plan_run"
ACTIVITY_INVOKE_LLM: Final = "invoke_llm"
ACTIVITY_GENERATE_EMBEDDING: Final = "generate_embedding"
ACTIVITY_DELETE_EMBEDDING: Final = "delete_embedding"
ACTIVITY_SEND_DEAD_LETTER: Final = "send_dead_letter"
ACTIVITY_VERIFY_CONTINUATION: Final = "verify_continuation"
# Started, never awaited, when a run starts waiting for review or escalates (PromptPlan.notify).
ACTIVITY_NOTIFY_REVIEWERS: Final = "notify_reviewers"

# The batch lane (docs/cost.md): a run waits in await_batch for its batched call's answer;
# one LlmBatch workflow per group of batched calls submits them to the provider's batch API,
# polls it and hands the answers back (signalled once when its group is full).
ACTIVITY_AWAIT_BATCH: Final = "await_batch"
WORKFLOW_TYPE_LLM_BATCH: Final = "LlmBatch"
SIGNAL_BATCH_FULL: Final = "batch_full"
ACTIVITY_SUBMIT_BATCH: Final = "submit_batch"
ACTIVITY_POLL_BATCH: Final = "poll_batch"
ACTIVITY_COLLECT_BATCH: Final = "collect_batch"
