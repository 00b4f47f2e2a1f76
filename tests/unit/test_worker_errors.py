"""The worker's start-up failures are typed, so each says what really happened."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorch.worker.clients import vector_store
from aiorch_runtime.config import Settings
from aiorch_runtime.errors import VectorStoreLocked


# qdrant-client leaves its lock file open when it cannot lock it (the client is never built, so
# nothing can close it); the worker exits right after, the test only drops the warning.
@pytest.mark.filterwarnings("ignore:unclosed file:ResourceWarning")
async def test_a_held_embedded_store_is_reported_as_locked(tmp_path: Path) -> None:
    """Opening an embedded vector store another client holds raises VectorStoreLocked naming
    its path; once that client closes, the store opens again."""
    settings = Settings(vector_store_path=str(tmp_path / "vectors"))
    first = vector_store(settings)
    with pytest.raises(VectorStoreLocked, match=str(tmp_path / "vectors")):
        vector_store(settings)
    await first.close()
    await vector_store(settings).close()
