"""A local OpenAI-compatible LLM server with deterministic fault injection.

The worker talks to it with the real ``openai`` client where no model API is reachable (local
stack, tests, benchmarks). It serves ``POST /v1/chat/completions``, ``POST /v1/embeddings``,
``GET /v1/models``, ``GET /healthz``, and the Files and Batches API (``batches``: upload,
download, create, retrieve, cancel, list; per-call failures by directive, a configurable
completion time and expiry; ``GET /_sim/batches`` counts the batches created). Run it with
``python -m aiorch.devstack simulator --host 127.0.0.1 --port 8700 [--embedding-dim 64]``, or in
this event loop with `running_simulator`. The package: ``faults`` (directives and global
faults), ``replies`` (what a call answers), ``server`` (the HTTP server and its state).

A chat reply is the JSON text ``{"content": "...", "needs_review": false}`` built from the last
user message; ``Reviewer feedback: ...`` lines in any message are echoed into the content, so a
re-edit visibly changes the answer. Embeddings are unit vectors hashed from the input text.

Directives, written anywhere in a chat message or embedding input and stripped from echoed
content: ``[sim:NAME]``, ``[sim:NAME=VALUE]``, ``[sim:NAME=VALUE:key=value:...]``.

- ``review``: the reply has ``needs_review: true``.
- ``status=CODE``: answer HTTP CODE (400-599) with an OpenAI error body; options
  ``retry_after=S`` (``Retry-After`` header), ``retry_after_ms=MS`` (``retry-after-ms``) and
  ``code=CODE`` (e.g. ``insufficient_quota``; 429 defaults to ``rate_limit_exceeded``),
  ``delay_ms=MS`` (wait before answering).
- ``hang`` (until the client disconnects), ``hang=SECONDS``, ``delay_ms=MS``: wait first.
- ``malformed`` (not JSON), ``fenced`` (JSON in a Markdown fence), ``badjson`` (JSON of the
  wrong shape), ``truncated`` (``finish_reason: "length"``, JSON cut in half), ``refusal``
  (``message.refusal`` set, content null), ``content_filter`` (that finish_reason, no content).

Every directive takes ``times=N`` (only the first N matching calls; default all),
``model=NAME`` and ``path=chat|embeddings`` (default ``chat``; only ``status``, ``hang`` and
``delay_ms`` may target embeddings). An unknown name or option is answered with HTTP 400.

Counters are keyed by (run key, directive text); the run key is the ``X-Run-Id`` header, else
a hash of the first user message (first embedding input; a batch's lines have no headers), so
each run sees its own N faults.

Prompt caching (``prompt_cache``): a chat prompt whose prefix the simulator has seen before (per
model, in blocks of 128 words, from 1,024) reports those words as
``usage.prompt_tokens_details.cached_tokens``; a request's ``prompt_cache_key`` is logged.
Directives are evaluated in order; a call counts against a directive only when it is reached
and its filters match. An error status ends evaluation and the first shape that fires wins, so
``[sim:status=429:times=2][sim:malformed:times=1]`` gives 429, 429, malformed, then success.

Control endpoints: ``GET /_sim/requests`` lists every request (``seq``, ``at``, ``path``,
``model``, ``run_id``, ``idempotency_key``, ``messages``, ``status`` (null while unanswered),
``fault`` (fired directives joined by ``+``), ``temperature``, ``response_format``,
``prompt_cache_key``, ``batch_id`` and ``custom_id`` (a batch's line), ``usage`` (the usage
block of the answer, null for errors));
``DELETE`` clears the log, every counter and the prompt cache. ``POST /_sim/faults`` with a
FaultSpec JSON adds a global fault checked before any directive (``path``/``model``/``times``
null = any/any/forever): an error ``status``, a ``delay_ms`` before answering, or both (a delay
alone lets the call go on to the directives, e.g. to slow every embeddings call, whose input
carries no directives); ``GET`` lists them with hit counts, ``DELETE`` removes them.

Shared rate limits (``ratelimit``): ``--rpm``/``--tpm`` at start, or ``PUT /_sim/ratelimits``
``{"rpm", "tpm", "model"}`` at run time, limit requests and tokens per minute per model across
all callers, answering with the provider's ``x-ratelimit-*`` headers and 429 + ``Retry-After``
/ ``retry-after-ms`` when a call does not fit; rate-limited calls are logged with fault
``rate_limit``.
"""

from aiorch.devstack.llm_simulator.server import (
    DEFAULT_MODELS,
    Simulator,
    build_app,
    running_simulator,
    serve,
)

__all__ = ["DEFAULT_MODELS", "Simulator", "build_app", "running_simulator", "serve"]
