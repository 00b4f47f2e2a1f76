"""A local OpenAI-compatible LLM server with deterministic fault injection.

The worker talks to it with the real ``openai`` client where no model API is reachable (local
stack, tests, benchmarks). It serves ``POST /v1/chat/completions``, ``POST /v1/embeddings``,
``GET /v1/models``, ``GET /healthz``, and the Files and Batches API (``batches``: upload,
download, create, retrieve, cancel, list; per-call failures by directive, a configurable
completion time and expiry; ``GET /_sim/batches`` counts the batches created). Run it with
``python -m aiorch.devstack simulator --host 127.0.0.1 --port 8700 [--embedding-dim 64]``, or in
this event loop with `running_simulator`. The package: ``faults`` (directives and global
faults), ``planning`` (which faults a call gets), ``replies`` (what a call answers),
``embeddings`` (an embeddings request and answer), ``server`` (the HTTP server and its state).

A chat reply is the JSON text ``{"content": "...", "needs_review": false}`` built from the last
user message; ``Reviewer feedback: ...`` lines in any message are echoed into the content, so a
re-edit visibly changes the answer. Embeddings are unit vectors hashed from the input text.

Directives (``[sim:NAME]``, ``[sim:NAME=VALUE:key=value:...]``, written anywhere in a chat
message or embedding input: faults and reply shapes for that run), the global faults of
``/_sim/faults`` and the control endpoints are documented for users in docs/simulator.md,
which ``tests/unit/test_simulator_docs.py`` keeps naming every directive and option the parser
(``faults``) takes. Counters are keyed by (run key, directive text); the run key is the
``X-Run-Id`` header, else a hash of the first user message (first embedding input).

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
