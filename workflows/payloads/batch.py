"""What the batch lane's workflow (``LlmBatch``) and its activities pass each other: one group of
batched model calls, submitted to the provider's batch API, polled, and collected (recorded in
history, so versioned like the rest of the contract: new fields get defaults)."""

from __future__ import annotations

from workflows.payloads._base import _Open

__all__ = [
    "BatchCollected",
    "BatchGroup",
    "BatchPolled",
    "BatchRound",
    "BatchSubmitted",
]


class BatchGroup(_Open):
    """Input of an ``LlmBatch`` workflow: group ``group`` of the batched calls to ``model`` at
    one endpoint (``scope``, the capacity store's name for both). It is submitted ``delay_s``
    after it opened, or once full (the ``batch_full`` signal), and its batch is polled at most
    every ``poll_s``; an expired batch's unfinished calls are submitted again, at most
    ``rounds`` batches in all."""

    scope: str
    model: str
    group: int
    delay_s: float
    poll_s: float
    rounds: int = 3


class BatchRound(_Open):
    """Input of ``submit_batch`` and ``collect_batch``: round ``round`` of a group (0: its
    calls; later rounds: those an expired batch left unfinished), in batch ``batch_id`` once
    submitted; ``last``: the group's last round (calls still unfinished fail)."""

    scope: str
    model: str
    group: int
    round: int = 0
    batch_id: str | None = None
    last: bool = False


class BatchSubmitted(_Open):
    """What ``submit_batch`` did: the provider's ``batch_id`` (None: nothing left to submit),
    how many calls it holds, and how many were ``dropped`` (their runs stopped waiting)."""

    batch_id: str | None = None
    calls: int = 0
    dropped: int = 0


class BatchPolled(_Open):
    """What ``poll_batch`` saw: the batch's ``status`` and whether it is final (``done``)."""

    status: str
    done: bool
    completed: int = 0
    failed: int = 0
    total: int = 0


class BatchCollected(_Open):
    """What ``collect_batch`` handed back: calls ``answered`` and ``failed``, and those the
    batch left ``unfinished`` (expired or cancelled before their turn)."""

    answered: int = 0
    failed: int = 0
    unfinished: int = 0
