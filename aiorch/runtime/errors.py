"""The runtime's own failures: the ones that stop a process before it can do its work.

Every error a user may meet derives from ``workflows.errors.OrchestratorError``, so each command
line prints it as one line and exits 1 instead of showing a traceback::

    OrchestratorError (workflows.errors)
    ├── ConfigError (aiorch.runtime.config)      a variable holds a value the project cannot use
    ├── PayloadUnreadable (aiorch.runtime.codec)  a payload this process cannot open
    ├── TemporalUnreachable                       no Temporal frontend answers at the address
    └── VectorStoreLocked                         another process holds the embedded vector store

The operator's tools add their own below it (``aiorch.ops``: the dead-letter queue, claim
check, redrive), and so does the command line (``aiorch.cli.output.CliError``).
"""

from __future__ import annotations

from workflows.errors import OrchestratorError


class TemporalUnreachable(OrchestratorError):
    """No Temporal frontend answered at the configured address.

    Args:
        address: ``TEMPORAL_ADDRESS`` as configured.
        reason: what the connection attempt reported.
    """

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(
            f"cannot reach Temporal at {address} ({reason}); is it running? Start the local "
            "stack with `make dev`, or set TEMPORAL_ADDRESS."
        )
        self.address = address
        self.reason = reason


class VectorStoreLocked(OrchestratorError):
    """The embedded vector store's folder is held by another process (one path, one worker).

    Args:
        path: ``VECTOR_STORE_PATH`` as configured.
    """

    def __init__(self, path: str) -> None:
        super().__init__(
            f"the embedded vector store at {path} is in use by another process (another worker?); "
            "an embedded store serves one process: give each worker its own VECTOR_STORE_PATH, "
            "or point them all at a Qdrant server (VECTOR_STORE_URL)"
        )
        self.path = path
