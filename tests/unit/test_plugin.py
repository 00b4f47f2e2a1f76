"""``AiOrchestratorPlugin``: one place that wires converter, sandbox pass-through, failure types
and tracing into clients, workers and replayers through the SDK's public plugin API."""

from __future__ import annotations

from typing import Any, cast

from temporalio.client import ClientConfig
from temporalio.converter import DataConverter
from temporalio.worker import ReplayerConfig, UnsandboxedWorkflowRunner, WorkerConfig
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from aiorch_runtime.codec import EncryptionCodec, new_key
from aiorch_runtime.config import Settings
from aiorch_runtime.converter import DATA_CONVERTER
from aiorch_runtime.plugin import AiOrchestratorPlugin
from aiorch_runtime.sandbox import THIRD_PARTY_PASS_THROUGH, WORKFLOW_PACKAGE, with_pass_through
from workflows.errors import InvalidTransition


def _replayer(plugin: AiOrchestratorPlugin) -> ReplayerConfig:
    return plugin.configure_replayer(cast(ReplayerConfig, {"workflows": []}))


def _passed_through(config: Any) -> set[str]:
    runner = config["workflow_runner"]
    assert isinstance(runner, SandboxedWorkflowRunner)
    return set(runner.restrictions.passthrough_modules)


def test_without_settings_it_is_the_plain_pydantic_converter_and_the_worker_runner() -> None:
    """No settings: the shared pydantic converter, the workflows package and the third-party
    modules passed through, ``InvalidTransition`` failing the run, no tracing."""
    config = _replayer(AiOrchestratorPlugin())
    assert config["data_converter"] is DATA_CONVERTER
    assert {WORKFLOW_PACKAGE, *THIRD_PARTY_PASS_THROUGH} <= _passed_through(config)
    assert list(config["workflow_failure_exception_types"]) == [InvalidTransition]
    assert not config.get("interceptors")


def test_payload_keys_in_the_settings_give_the_encrypting_converter() -> None:
    """With PAYLOAD_KEYS the client's converter encrypts payloads and encodes failures, so a
    worker or replayer built from the same settings reads what the starter wrote."""
    settings = Settings(payload_keys=f"k1:{new_key()}")
    config = AiOrchestratorPlugin(settings).configure_client(cast(ClientConfig, {}))
    converter = config["data_converter"]
    assert isinstance(converter, DataConverter)
    assert isinstance(converter.payload_codec, EncryptionCodec)


def test_full_sandbox_keeps_the_workflows_package_inside() -> None:
    """``pass_workflows=False`` re-imports the workflow modules per run (every rule checked)
    but still shares the third-party modules."""
    passed = _passed_through(_replayer(AiOrchestratorPlugin(pass_workflows=False)))
    assert WORKFLOW_PACKAGE not in passed
    assert set(THIRD_PARTY_PASS_THROUGH) <= passed


def test_the_worker_gets_the_runner_and_failure_types_and_keeps_its_own() -> None:
    """On a worker the plugin adds its pass-through to the worker's own sandbox restrictions
    and appends its failure types to the worker's."""
    own = SandboxedWorkflowRunner().restrictions.with_passthrough_modules("my_module")
    worker_config = cast(
        WorkerConfig,
        {
            "workflow_runner": SandboxedWorkflowRunner(restrictions=own),
            "workflow_failure_exception_types": [KeyError],
        },
    )
    config = AiOrchestratorPlugin().configure_worker(worker_config)
    assert {"my_module", WORKFLOW_PACKAGE} <= _passed_through(config)
    assert list(config["workflow_failure_exception_types"]) == [KeyError, InvalidTransition]


def test_a_runner_without_sandbox_is_left_alone() -> None:
    """A developer's unsandboxed runner (debugging) is not wrapped or replaced."""
    runner = UnsandboxedWorkflowRunner()
    assert with_pass_through(runner) is runner
