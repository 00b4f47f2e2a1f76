"""The test library: what the test packages import, kept apart from the tests themselves.

For the live-server layers (tests/e2e, tests/security, tests/deploy): ``live_stack`` (the
worker's test settings, a local stack with its worker, the command lines), ``reviewing``
(signed reviews), ``webhooks`` (webhook receivers), ``postgres`` (a real PostgreSQL server),
``certs`` and ``grpc_proxy`` (a secured or flaky Temporal frontend).

For every layer: ``builders`` (valid payloads), ``history_events`` (what the server recorded),
``pipeline_files``, ``invoices`` and ``pdfs`` (inputs the tests write themselves).
"""

from pathlib import Path

# Not resolve(): a test module that defines a workflow is re-imported, with what it imports from
# here, in the workflow sandbox, which refuses filesystem calls.
ROOT = Path(__file__).parents[2]
"""The repository's root."""
