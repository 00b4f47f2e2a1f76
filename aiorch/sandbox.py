"""The worker's workflow sandbox: the SDK's, minus two costs it pays on every run.

1. **The workflow modules are imported once per worker, not once per run.** The SDK's sandbox
   imports the module that defines the workflow afresh for each new run, so each run rebuilt
   ``AiOrchestrator`` and ran ``@workflow.defn`` over it again (about 3 ms of worker CPU under
   load). `worker_workflow_runner` passes the whole ``workflows`` package through instead, as
   the other workflow-side modules already were. What the sandbox would have checked at run
   time is checked before: ``tests/unit/test_workflow_code.py`` holds every module of
   ``workflows/`` to the sandbox's rules (no wall clock, randomness, environment, files or I/O
   clients, no mutable module state), and the workflow and replay tests run the same code under
   the SDK's full sandbox, which re-imports it for every run and enforces every restriction.
2. **Payload contexts are answered without entering the sandbox.** The SDK's runner enters the
   sandbox (swaps ``sys.modules`` and the import hooks in and out, then compiles and execs a
   code string) not only for each activation, where workflow code runs, but also every time it
   encodes or decodes a payload sequence, to ask the run which serialization context applies:
   37 times in a happy-path run, against 5 activations. The SDK answers that from its own record
   of the run's pending commands; no workflow code is involved. `LeanSandboxedWorkflowRunner`
   asks the run directly, and compiles each code string it execs once per process.

Workflow code itself still runs only inside the sandbox, with its restricted builtins.

Measured by replaying the recorded happy path 300 times per variant, alternating (medians of 4
rounds): 13.9 ms of CPU per run with the SDK's runner, 10.4 with the lean runner alone and 7.6
with the pass-through too.

`LeanSandboxedWorkflowRunner` subclasses the SDK runner's run (``_runner._Instance``), which
temporalio does not export. A run whose in-sandbox half is not where it expects asks the SDK's
way, so that kind of SDK change costs speed, not correctness; an SDK without that class stops
the worker at import, loudly. ``tests/replay/test_sandbox.py`` fails when the installed SDK no
longer takes the lean path.
"""

from __future__ import annotations

import functools
from types import CodeType
from typing import Any

from temporalio.converter import SerializationContext
from temporalio.converter._extstore import StorageDriverStoreContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox import _runner as sdk_runner

# The package imported once per worker; every module in it is workflow-side code.
WORKFLOW_PACKAGE = "workflows"
# The global under which the SDK's runner keeps the in-sandbox half of a run.
_IN_SANDBOX = "__temporal_in_sandbox"


@functools.lru_cache(maxsize=64)
def _compiled(code: str) -> CodeType:
    # The runner execs a handful of fixed strings (one per workflow class to import it, then the
    # activation call); compiling one of them costs about 15 us.
    return compile(code, "<string>", "exec")


class _LeanInstance(sdk_runner._Instance):
    """The SDK's sandboxed run, answering payload-context questions without entering it."""

    def __init__(
        self,
        instance_details: WorkflowInstanceDetails,
        runner_class: type[WorkflowRunner],
        restrictions: SandboxRestrictions,
    ) -> None:
        super().__init__(instance_details, runner_class, restrictions)
        self.in_sandbox: Any = self.globals_and_locals.get(_IN_SANDBOX)

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        super()._run_code(_compiled(code), **extra_globals)  # type: ignore[arg-type]

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        if self.in_sandbox is None:
            return super().get_serialization_context(command_info)
        return self.in_sandbox.get_serialization_context(command_info)  # type: ignore[no-any-return]

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        if self.in_sandbox is None:
            return super().get_external_store_context(command_info)
        return self.in_sandbox.get_external_store_context(command_info)  # type: ignore[no-any-return]


class LeanSandboxedWorkflowRunner(SandboxedWorkflowRunner):
    """``SandboxedWorkflowRunner`` whose runs answer payload-context questions directly."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _LeanInstance(det, self.runner_class, self.restrictions)


def worker_workflow_runner() -> LeanSandboxedWorkflowRunner:
    """The worker's runner: lean, with the ``workflows`` package imported once per worker."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(WORKFLOW_PACKAGE)
    return LeanSandboxedWorkflowRunner(restrictions=restrictions)
