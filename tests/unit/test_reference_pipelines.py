"""The LLM pipeline and the document pipeline, written as pipeline files, compile into the
same graphs as their Python form."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorch_runtime.pipeline_files import read_file
from workflows.data import CATALOG, compile_spec
from workflows.documents.graph import GRAPH as DOCUMENT_GRAPH
from workflows.engine.graph import Graph
from workflows.llm.graph import GRAPH as LLM_GRAPH

REFERENCE = Path(__file__).resolve().parents[2] / "pipelines" / "reference"


@pytest.mark.parametrize(
    ("file", "python"), [("llm.yaml", LLM_GRAPH), ("documents.yaml", DOCUMENT_GRAPH)]
)
def test_a_python_pipeline_written_as_a_file_compiles_to_its_graph(
    file: str, python: Graph
) -> None:
    """Same name, same states with the same status, progress, description, role and
    visibility, same edges (every state, event and target)."""
    checked = read_file(REFERENCE / file, CATALOG)
    assert checked.problems == ()
    assert checked.record is not None
    graph = compile_spec(checked.record.spec, CATALOG).graph
    assert graph.name == python.name
    assert dict(graph.states) == dict(python.states)
    assert set(graph.transitions) == set(python.transitions)
    assert len(graph.transitions) == len(python.transitions)


def test_the_reference_files_may_not_be_served_under_the_python_pipelines_names() -> None:
    """A worker's folder refuses them as they are: their names are the Python pipelines'."""
    for file in ("llm.yaml", "documents.yaml"):
        checked = read_file(REFERENCE / file, CATALOG, ["AiOrchestrator", "DocumentPipeline"])
        assert [problem.rule for problem in checked.problems] == ["name-taken"]
        assert checked.problems[0].line == next(
            n
            for n, line in enumerate((REFERENCE / file).read_text().splitlines(), 1)
            if line.startswith("name:")
        )
