"""Everything the Temporal SDK needs from this project, wired once on its public plugin API.

``AiOrchestratorPlugin`` is a ``temporalio.plugin.SimplePlugin``, as the SDK's contrib
integrations and pydantic-ai's Temporal integration are. Given to ``Client.connect`` it
configures the client and every worker built on that client; given to ``Replayer`` (or to
``WorkflowEnvironment.start_time_skipping``) it configures those alike:

- the data converter: pydantic payloads, plus the AES-GCM codec and encoded failure attributes
  when the settings hold payload keys (``aiorch_runtime.converter``), and activity failures
  bounded to stay inside the server's failure size limit (``aiorch_runtime.failures``);
- the sandbox pass-through on whatever sandboxed runner the worker or replayer has
  (``aiorch_runtime.sandbox``);
- ``workflow_failure_exception_types``: a graph violation (``InvalidTransition``) fails the run
  instead of retrying its workflow task forever, whichever workflow raises it;
- OpenTelemetry, when the settings configure an exporter (``OTEL_EXPORTER_OTLP_ENDPOINT``): the
  SDK's ``OpenTelemetryInterceptor`` with a span for the start call, the workflow run and each
  activity, carrying the trace context in Temporal headers;
- any further interceptors the caller adds.

The choice of tracing is made from the settings, not from whether some earlier call installed a
tracer provider; the provider itself is installed by ``aiorch_runtime.telemetry.tracing``.
"""

from __future__ import annotations

from collections.abc import Sequence

import temporalio.client
import temporalio.worker
from temporalio.contrib.opentelemetry import OpenTelemetryInterceptor
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkflowRunner

from aiorch_runtime.config import Settings
from aiorch_runtime.converter import DATA_CONVERTER, data_converter
from aiorch_runtime.sandbox import with_pass_through
from workflows.errors import InvalidTransition

PLUGIN_NAME = "AiOrchestratorPlugin"
# Exceptions that fail the run (not the workflow task) when workflow code raises them.
WORKFLOW_FAILURE_TYPES: tuple[type[BaseException], ...] = (InvalidTransition,)

Interceptor = temporalio.client.Interceptor | temporalio.worker.Interceptor


class AiOrchestratorPlugin(SimplePlugin):
    """The project's converter, sandbox pass-through, failure types, tracing and interceptors.

    Args:
        settings: the deployment's settings: they choose the converter (payload keys) and
            tracing (an OTLP endpoint). None: the plain pydantic converter, no tracing.
        data_converter: a converter to use instead of the one the settings give (tests that
            hold keys of their own).
        pass_workflows: pass the ``workflows`` package through the sandbox (the worker's
            default); False re-imports it for every run, so the sandbox checks every rule.
        tracing: overrides the settings' choice of OpenTelemetry.
        interceptors: further client or worker interceptors, applied after tracing's.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        data_converter: DataConverter | None = None,
        pass_workflows: bool = True,
        tracing: bool | None = None,
        interceptors: Sequence[Interceptor] = (),
    ) -> None:
        self.converter = data_converter or _converter_for(settings)
        self.pass_workflows = pass_workflows
        if tracing is None:
            tracing = settings is not None and settings.tracing_enabled
        self.tracing = tracing
        # One instance for client and worker: the SDK applies an interceptor that is both to
        # each once, and skips it on a worker whose client already has it.
        telemetry: list[Interceptor] = (
            [OpenTelemetryInterceptor(add_temporal_spans=True)] if self.tracing else []
        )
        super().__init__(
            PLUGIN_NAME,
            data_converter=self.converter,
            workflow_runner=self._runner,
            workflow_failure_exception_types=list(WORKFLOW_FAILURE_TYPES),
            # None, not [], when there are none: the SDK then leaves the interceptors as they are.
            interceptors=[*telemetry, *interceptors] or None,
        )

    def _runner(self, runner: WorkflowRunner | None) -> WorkflowRunner:
        return with_pass_through(runner, pass_workflows=self.pass_workflows)


def _converter_for(settings: Settings | None) -> DataConverter:
    return DATA_CONVERTER if settings is None else data_converter(settings)
