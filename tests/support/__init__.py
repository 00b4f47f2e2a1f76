"""The test library: what the test packages import, kept apart from the tests themselves.

The workflow layer's harness (tests/workflows), on Temporal's time-skipping test server:
``time_skipping`` (the server, how it behaves, the real-time bounds on task progress),
``scripted_activities`` (a scripted double of every activity, recording its inputs),
``orchestration`` (``Orchestration``: one test's worker, activities and runs) and
``run_history`` (a run's own history, checked against the graph).

For the live-server layers (tests/e2e, tests/security, tests/deploy): ``live_stack`` (the
worker's test settings, a local stack with its worker, the command lines), ``live_runs``
(starting runs on it and waiting for their states), ``simulator`` (the LLM simulator's request
log and faults), ``reviewing`` (signed reviews), ``webhooks`` (webhook receivers), ``postgres``
(a real PostgreSQL server), ``certs`` and ``grpc_proxy`` (a secured or flaky Temporal
frontend).

For every layer: ``builders`` (valid payloads), ``history_events`` (what the server recorded),
``pipeline_files``, ``invoices`` and ``pdfs`` (inputs the tests write themselves).
"""

from pathlib import Path

# Not resolve(): a test module that defines a workflow is re-imported, with what it imports from
# here, in the workflow sandbox, which refuses filesystem calls.
ROOT = Path(__file__).parents[2]
"""The repository's root."""
