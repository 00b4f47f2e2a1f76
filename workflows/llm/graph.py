"""The LLM pipeline's state graph: fetch the prompt, call the model, review, embed.

Built on the engine's graph value with its shared sub-graphs, so the engine walks it as it walks
any pipeline; the DOT and Mermaid diagrams in ``docs/`` and the README come from ``GRAPH``.
The state names are the contract's (``AiState``, ``status``, history entries).
"""

from __future__ import annotations

from enum import StrEnum

from workflows.engine.graph import (
    AWAIT_BATCH,
    AWAIT_BUDGET,
    AWAIT_CAPACITY,
    AWAIT_REVIEW,
    CANCELLED,
    COMPLETED,
    DEAD_LETTER,
    ESCALATE,
    FAILED,
    IDLE,
    TERMINAL_STATES,
    Event,
    Graph,
    StateInfo,
    Status,
    Transition,
    cancel_edges,
    review_edges,
    review_states,
)
from workflows.steps import CallStates, model_call_edges, model_call_states

NAME = "AiOrchestrator"


class State(StrEnum):
    """Every state a run of this pipeline can be in. The values are the contract's names."""

    IDLE = IDLE
    FETCH_PROMPT = "fetch_prompt"
    INVOKE_LLM = "invoke_llm"
    AWAIT_CAPACITY = AWAIT_CAPACITY
    AWAIT_BUDGET = AWAIT_BUDGET
    AWAIT_BATCH = AWAIT_BATCH
    RETRY_LLM = "retry_llm"
    AWAIT_REVIEW = AWAIT_REVIEW
    ESCALATE = ESCALATE
    GENERATE_EMBEDDING = "generate_embedding"
    COMPLETED = COMPLETED
    FAILED = FAILED
    DEAD_LETTER = DEAD_LETTER
    CANCELLED = CANCELLED


class LlmEvent(StrEnum):
    """This pipeline's own events (the shared ones are the engine's ``Event``)."""

    PROMPT_READY = "prompt_ready"
    LLM_OK = "llm_ok"
    NEEDS_REVIEW = "needs_review"
    EMBEDDED = "embedded"


# The call, its retries and waits, and the review form one loop (a reedit calls the model
# again), so they share one progress figure: a run's progress never goes down.
_CALLING = 60
_CALL = CallStates(retry=State.RETRY_LLM)
_WAITS = model_call_states(
    _CALLING, _CALL, descriptions={"retry": "backing off before the next LLM attempt"}
)

GRAPH = Graph.of(
    NAME,
    {
        State.FETCH_PROMPT: StateInfo(
            Status.PROCESSING, 10, "loading input and building the prompt"
        ),
        State.INVOKE_LLM: StateInfo(Status.PROCESSING, _CALLING, "calling the LLM"),
        # Listed as the published diagrams have always listed them, the retry state last.
        **{
            state: _WAITS[state]
            for state in (State.AWAIT_CAPACITY, State.AWAIT_BUDGET, State.AWAIT_BATCH, _CALL.retry)
        },
        **review_states(_CALLING),
        # A run passes through it in moments: showing it would cost an upsert (an action).
        State.GENERATE_EMBEDDING: StateInfo(
            Status.PROCESSING, 85, "embedding and storing the output", shown=False
        ),
    },
    (
        Transition(State.IDLE, Event.START, State.FETCH_PROMPT),
        Transition(State.FETCH_PROMPT, LlmEvent.PROMPT_READY, State.INVOKE_LLM),
        Transition(State.FETCH_PROMPT, Event.PERMANENT_ERROR, State.FAILED),
        Transition(State.INVOKE_LLM, LlmEvent.LLM_OK, State.GENERATE_EMBEDDING),
        Transition(State.INVOKE_LLM, LlmEvent.NEEDS_REVIEW, State.AWAIT_REVIEW),
        Transition(State.INVOKE_LLM, Event.PERMANENT_ERROR, State.FAILED),
    ),
    model_call_edges(State.INVOKE_LLM, _CALL),
    review_edges(approve=State.GENERATE_EMBEDDING, reedit=State.INVOKE_LLM),
    (
        Transition(State.GENERATE_EMBEDDING, LlmEvent.EMBEDDED, State.COMPLETED),
        Transition(State.GENERATE_EMBEDDING, Event.EXHAUSTED, State.DEAD_LETTER),
    ),
    cancel_edges(state for state in State if state not in TERMINAL_STATES),
)
