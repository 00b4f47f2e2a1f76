"""The workflow sandbox the worker, the tests and the replayer use: the SDK's own runner, with
pass-through set on its public options.

Passed through (imported once per process, shared by every run, not re-imported per run):

- ``jwt`` and ``cryptography``: review tokens are verified inside the workflow, and the
  ``cryptography`` extension imports its exception types lazily, the first time a signature
  fails; inside the sandbox that import would go through the sandbox's importer and crash the
  extension, so the whole package passes through;
- with ``pass_workflows`` (the worker's default), the ``workflows`` package itself. The SDK's
  sandbox otherwise imports the module defining a workflow afresh for every run. What the
  sandbox would check in those modules at run time is checked before they ship:
  ``tests/unit/test_workflow_code.py`` holds every module of ``workflows/`` to the sandbox's
  rules (no wall clock, randomness, environment, files or I/O clients, no mutable module
  state), and the workflow and replay tests also run the code with ``pass_workflows=False``,
  so the sandbox re-imports it for every run and enforces every restriction.

Workflow code itself always runs inside the sandbox, with its restricted builtins.
"""

from __future__ import annotations

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

WORKFLOW_PACKAGE = "workflows"
THIRD_PARTY_PASS_THROUGH = ("jwt", "cryptography")


def workflow_runner(*, pass_workflows: bool = True) -> SandboxedWorkflowRunner:
    """The SDK's sandboxed runner with the project's pass-through (see the module docstring)."""
    modules = (*THIRD_PARTY_PASS_THROUGH, *((WORKFLOW_PACKAGE,) if pass_workflows else ()))
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*modules)
    return SandboxedWorkflowRunner(restrictions=restrictions)
