"""The runtime's own failures: the ones that stop a process before it can do its work.

Every error a user may meet derives from ``workflows.errors.OrchestratorError``, so each command
line prints it as one line and exits 1 instead of showing a traceback::

    OrchestratorError (workflows.errors)
    ├── ConfigError                               a variable holds a value the project cannot use
    ├── PayloadUnreadable (aiorch_runtime.codec)  a payload this process cannot open
    ├── TemporalUnreachable                       no working connection to the Temporal frontend
    └── VectorStoreLocked                         another process holds the embedded vector store

The operator's tools add their own below it (``aiorch.ops``: the dead-letter queue, claim
check, redrive), and so does the command line (``aiorch.cli.output.CliError``).
"""

from __future__ import annotations

from workflows.errors import OrchestratorError


class ConfigError(OrchestratorError):
    """An environment variable (or a file it names) holds a value the project cannot use.

    ``aiorch_runtime.config``, which reads the environment, re-exports it: import it from there
    or from here.
    """


class TemporalUnreachable(OrchestratorError):
    """No working connection to Temporal: nothing answers at the address, TLS fails either way
    (an untrusted or refused certificate, a key that does not match), or the server refuses the
    credentials (a missing or wrong API key). One line: where, how, and what to check.

    Args:
        address: where and how the process connected (``aiorch_runtime.connection.
            describe_target``: address, namespace, transport), or ``TEMPORAL_ADDRESS``.
        reason: what went wrong and what to set.
    """

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot connect to Temporal at {address}: {reason}")
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
