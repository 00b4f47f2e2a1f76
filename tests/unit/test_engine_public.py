"""The engine's public face: what a pipeline author imports from ``workflows.engine``."""

from __future__ import annotations

import subprocess
import sys

import pytest

import workflows.engine as engine
from workflows.engine.graph import Graph
from workflows.engine.reviews import enter


def test_every_public_name_resolves_to_its_home() -> None:
    """Each name in ``__all__`` is importable from the package and is the object its module
    defines (``enter_review`` is ``reviews.enter``); an unknown name is an AttributeError."""
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name
    assert engine.Graph is Graph
    assert engine.enter_review is enter
    with pytest.raises(AttributeError, match="no_such_name"):
        engine.no_such_name  # noqa: B018


def test_importing_one_engine_module_leaves_the_workflow_class_unimported() -> None:
    """Importing ``workflows.engine.identity`` (as the runtime's configuration does) or the
    package itself imports neither the workflow class's module nor the SDK's workflow module;
    asking for ``PipelineWorkflow`` does."""
    probe = (
        "import sys, workflows.engine, workflows.engine.identity\n"
        "print('workflows.engine.workflow' in sys.modules, 'temporalio.workflow' in sys.modules)\n"
        "workflows.engine.PipelineWorkflow\n"
        "print('workflows.engine.workflow' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out == ["False", "False", "True"]
