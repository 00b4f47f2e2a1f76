"""The workflow sandbox the worker, the tests and the replayer use: the SDK's own runner, with
pass-through set on its public options (``SandboxRestrictions.with_passthrough_modules``).

Passed through (imported once per process, shared by every run, not re-imported per run):

- ``jwt`` and ``cryptography``: review tokens are verified inside the workflow, and the
  ``cryptography`` extension imports its exception types lazily, the first time a signature
  fails; inside the sandbox that import would go through the sandbox's importer and crash the
  extension, so the whole package passes through;
- ``opentelemetry``: the workflow's transition spans (``workflows.engine.observability``) must reach
  the process's tracer provider, which lives in the API module's globals; a copy re-imported in
  the sandbox would hold none and drop every span (the SDK's own OpenTelemetry plugin passes it
  through for the same reason);
- ``jinja2`` (with ``markupsafe``) and ``jsonschema`` (with ``referencing``, ``rpds``,
  ``attrs`` and ``jsonschema_specifications``, which reads its metaschemas from files when it
  is imported): a pipeline defined as data renders its prompt templates in the sandboxed
  template engine and checks its outputs against their JSON Schemas inside the workflow
  (``workflows.data``). Both import parts of themselves lazily, which inside the sandbox would
  be re-imported for every run;
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

import dataclasses

from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

WORKFLOW_PACKAGE = "workflows"
THIRD_PARTY_PASS_THROUGH: tuple[str, ...] = (
    "jwt",
    "cryptography",
    "opentelemetry",
    "jinja2",
    "markupsafe",
    "jsonschema",
    "referencing",
    "rpds",
    "attrs",
    "jsonschema_specifications",
)


def pass_through_modules(*, pass_workflows: bool = True) -> tuple[str, ...]:
    """The modules the sandbox shares with the worker instead of re-importing per run."""
    return (*THIRD_PARTY_PASS_THROUGH, *((WORKFLOW_PACKAGE,) if pass_workflows else ()))


def with_pass_through(
    runner: WorkflowRunner | None, *, pass_workflows: bool = True
) -> WorkflowRunner:
    """``runner`` with the project's pass-through added; a runner without a sandbox (one a
    developer chose for debugging) is returned as it is. None means the SDK's default runner.
    """
    runner = runner if runner is not None else SandboxedWorkflowRunner()
    if not isinstance(runner, SandboxedWorkflowRunner):
        return runner
    modules = pass_through_modules(pass_workflows=pass_workflows)
    return dataclasses.replace(
        runner, restrictions=runner.restrictions.with_passthrough_modules(*modules)
    )


def workflow_runner(*, pass_workflows: bool = True) -> WorkflowRunner:
    """The SDK's sandboxed runner with the project's pass-through (see the module docstring)."""
    return with_pass_through(SandboxedWorkflowRunner(), pass_workflows=pass_workflows)
