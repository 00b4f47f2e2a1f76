"""Errors of the runtime wiring, under the project's hierarchy (``workflows.errors``)::

    OrchestratorError            workflows.errors
    ├── ConfigError              a variable (or a file it names) holds an unusable value
    └── TemporalUnreachable      no working connection to the Temporal frontend

Each carries one line that says what went wrong and what to do; the worker and the CLI print it
as it is, never a traceback.
"""

from __future__ import annotations

from workflows.errors import OrchestratorError


class ConfigError(OrchestratorError):
    """An environment variable holds a value the project cannot use (``aiorch.runtime.config``
    re-exports it, where it has always been imported from)."""


class TemporalUnreachable(OrchestratorError):
    """No working connection to Temporal: the address does not answer, TLS fails (a wrong or
    untrusted certificate, a missing client key), or the server refuses the credentials (a
    missing or wrong API key). The message names the address and the likely fix."""
