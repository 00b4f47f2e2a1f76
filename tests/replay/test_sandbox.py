"""The worker's lean sandbox runner (`aiorch.sandbox`) takes its shortcuts with this SDK, and
they change nothing a run decides or encodes: same payload contexts, same commands."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.converter import ActivitySerializationContext
from temporalio.worker import Replayer, WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import _runner as sdk_runner

from aiorch import sandbox
from aiorch.temporal import DATA_CONVERTER
from tests.replay.test_replay import HISTORIES
from workflows.orchestrator import AiOrchestrator

WORKER_RESTRICTIONS = sandbox.worker_workflow_runner().restrictions


@dataclass
class Observed:
    """What the runs of one replay did, as seen from the runner."""

    sandbox_entries: int = 0
    workflow_classes: list[type] = field(default_factory=list)
    context_pairs: list[tuple[Any, Any]] = field(default_factory=list)


class _CountingInstance(sdk_runner._Instance):
    """A run counting its entries into the sandbox once created (creating it enters twice)."""

    observed: Observed | None = None

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        if self.observed is not None:
            self.observed.sandbox_entries += 1
        super()._run_code(code, **extra_globals)


class _ObservedLeanInstance(sandbox._LeanInstance, _CountingInstance):
    """The lean run, also asking the SDK's way (through the sandbox) to compare the answers."""

    def _compare(self, lean: Any, stock_path: Any, command_info: CommandInfo | None) -> Any:
        observed = self.observed
        assert observed is not None
        entries = observed.sandbox_entries
        stock = stock_path(self, command_info)
        observed.sandbox_entries = entries  # the comparison's own entry does not count
        observed.context_pairs.append((lean, stock))
        return lean

    def get_serialization_context(self, command_info: CommandInfo | None) -> Any:
        lean = super().get_serialization_context(command_info)
        return self._compare(lean, sdk_runner._Instance.get_serialization_context, command_info)

    def get_external_store_context(self, command_info: CommandInfo | None) -> Any:
        lean = super().get_external_store_context(command_info)
        return self._compare(lean, sdk_runner._Instance.get_external_store_context, command_info)


@dataclass(frozen=True)
class ObservingRunner(SandboxedWorkflowRunner):
    """The lean runner (or the SDK's) with each run recording into ``observed``."""

    observed: Observed = field(default_factory=Observed)
    lean: bool = True

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        instance_class = _ObservedLeanInstance if self.lean else _CountingInstance
        instance = instance_class(det, self.runner_class, self.restrictions)
        instance.observed = self.observed
        workflow_class: Any = instance.globals_and_locals["__temporal_workflow_class"]
        self.observed.workflow_classes.append(workflow_class)
        return instance


async def replay_all(runner: Any) -> None:
    replayer = Replayer(
        workflows=[AiOrchestrator], data_converter=DATA_CONVERTER, workflow_runner=runner
    )
    for path in HISTORIES:
        history = WorkflowHistory.from_json(path.stem, path.read_text(encoding="utf-8"))
        await replayer.replay_workflow(history, raise_on_replay_failure=True)


async def test_lean_runner_answers_payload_contexts_as_the_sdk_does() -> None:
    """Replaying every recorded history, each payload context the lean runner gives equals the
    one the SDK's own path (through the sandbox) gives, activity contexts included."""
    observed = Observed()
    await replay_all(ObservingRunner(restrictions=WORKER_RESTRICTIONS, observed=observed))
    assert observed.context_pairs
    mismatches = [(lean, stock) for lean, stock in observed.context_pairs if lean != stock]
    assert mismatches == []
    activity_contexts = [
        lean for lean, _ in observed.context_pairs if isinstance(lean, ActivitySerializationContext)
    ]
    assert {context.activity_type for context in activity_contexts} >= {
        "invoke_llm",
        "generate_embedding",
    }


async def test_lean_runner_enters_the_sandbox_only_to_run_workflow_code() -> None:
    """With the SDK's runner a run enters the sandbox for every payload sequence it converts;
    with the worker's runner only to create the run and for its activations, and it uses the
    worker's own ``AiOrchestrator`` instead of importing the module again."""
    stock, lean = Observed(), Observed()
    await replay_all(ObservingRunner(observed=stock, lean=False))
    await replay_all(ObservingRunner(restrictions=WORKER_RESTRICTIONS, observed=lean))
    print(f"sandbox entries: {stock.sandbox_entries} SDK, {lean.sandbox_entries} lean")
    assert lean.sandbox_entries * 3 < stock.sandbox_entries
    assert all(cls is AiOrchestrator for cls in lean.workflow_classes)
    assert not any(cls is AiOrchestrator for cls in stock.workflow_classes)
