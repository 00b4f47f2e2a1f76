"""Pydantic models for every payload: the wire contract shared by starter, workflow and activities.

New fields always get defaults, so histories recorded before a field existed still decode.
Inbound payloads (requests, reviews, LLM replies) forbid unknown fields so a typo is an error,
not silently ignored.

Sizes are bounded so no run can fail on Temporal's payload limits (warning at 256 KB, error at
2 MB): an inline ``user_message`` is at most ``MAX_INLINE_MESSAGE_BYTES`` (larger documents
travel by reference, ``file://`` or ``s3://``), metadata at most ``MAX_METADATA_BYTES``, feedback
at most ``MAX_FEEDBACK_CHARS`` (runs may set a lower limit).

Every text a client sends must be valid Unicode (no lone surrogates, which no payload could
carry onwards), and metadata is bounded in size and depth.

History entries come in three kinds, all ``HistoryEntry``:

- a *transition*: an edge of the run's pipeline graph (a ``workflows.engine.graph.Graph``),
  validated before it is recorded; ``event`` is the edge's event (the engine's own are
  ``workflows.engine.graph.Event``). Review decisions also carry ``reviewer``, ``feedback`` and
  ``review_round``.
- ``continued_as_new`` (``NOTE_CONTINUED_AS_NEW``): the run moved on to a fresh Temporal run
  carrying its state; ``from_state == to_state``. Not a transition.
- ``review_vote`` (``NOTE_REVIEW_VOTE``): a reviewer's approval or rejection that a review
  policy counted without deciding the round (a quorum not reached yet); ``vote`` says which,
  ``reviewer`` and ``review_round`` who and when; ``from_state == to_state``. Not a transition.

Reviews the run refused are counted (``RunStatus.reviews_refused``), never stored one by one,
so no sender can grow a run's state.
"""

from workflows.payloads import (
    _base,
    activity,
    batch,
    client,
    decisions,
    experiment,
    policy,
    review_rules,
    run_policy,
    state,
    variant,
)
from workflows.payloads._base import *  # noqa: F403
from workflows.payloads.activity import *  # noqa: F403
from workflows.payloads.batch import *  # noqa: F403
from workflows.payloads.client import *  # noqa: F403
from workflows.payloads.decisions import *  # noqa: F403
from workflows.payloads.experiment import *  # noqa: F403
from workflows.payloads.policy import *  # noqa: F403
from workflows.payloads.review_rules import *  # noqa: F403
from workflows.payloads.run_policy import *  # noqa: F403
from workflows.payloads.state import *  # noqa: F403
from workflows.payloads.variant import *  # noqa: F403

__all__ = [
    *_base.__all__,
    *activity.__all__,
    *batch.__all__,
    *client.__all__,
    *decisions.__all__,
    *experiment.__all__,
    *policy.__all__,
    *review_rules.__all__,
    *run_policy.__all__,
    *state.__all__,
    *variant.__all__,
]
