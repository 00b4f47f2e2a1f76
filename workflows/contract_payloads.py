"""Every payload of the contract, in one list: what a client sends to and reads from a run of
each shipped pipeline, and what every pipeline shares (reviews, operator signals, status,
history, dead letters, the model's reply).

``make graph`` writes each one's JSON schema to ``docs/schemas/`` and ``aiorch schema NAME``
prints one. A pipeline written in Python brings its request and result through its
registration; the runs of pipeline files take `DataRequest` and return `DataResult`.
"""

from __future__ import annotations

from pydantic import BaseModel

from workflows.data.payloads import DataRequest, DataResult
from workflows.orchestrator import SHIPPED
from workflows.payloads import (
    BudgetDecision,
    DeadLetterMessage,
    HistoryEntry,
    LlmReply,
    OperatorRequest,
    ReviewDecision,
    Revocation,
    RunOptions,
    RunStatus,
)

SHARED_MODELS: tuple[type[BaseModel], ...] = (
    RunOptions,
    ReviewDecision,
    OperatorRequest,
    Revocation,
    BudgetDecision,
    HistoryEntry,
    RunStatus,
    DeadLetterMessage,
    LlmReply,
)
ALL_MODELS: tuple[type[BaseModel], ...] = tuple(
    dict.fromkeys(
        [
            *(model for p in SHIPPED for model in (p.request, p.result_model)),
            DataRequest,
            DataResult,
            *SHARED_MODELS,
        ]
    )
)
