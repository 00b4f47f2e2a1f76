"""Registering pipelines written in Python (``PIPELINE_MODULES``, ``aiorch.ops.pipelines.load``)
and starting any registered pipeline from the command line through its request shape."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiorch.cli import build_app
from aiorch.ops import pipelines
from aiorch_runtime.config import ConfigError
from workflows.engine.graph import GraphError
from workflows.engine.registry import RegisteredPipelines
from workflows.llm.pipeline import PIPELINE as LLM
from workflows.orchestrator import SHIPPED

REQUEST_ID = "0123456789abcdef01234567"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on the import path for modules written by a test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("registry_case_")]:
        del sys.modules[name]


def test_the_shipped_pipelines_come_first_and_a_module_adds_its_own(site: Path) -> None:
    """``load`` gives the shipped pipelines, then each module's ``PIPELINE``; a module named
    twice registers its pipeline once."""
    (site / "registry_case_same.py").write_text(
        "from workflows.llm.pipeline import PIPELINE\n", encoding="utf-8"
    )
    assert pipelines.load([]) == SHIPPED
    assert pipelines.load(["registry_case_same", "registry_case_same"]) == SHIPPED


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (None, "cannot import 'registry_case_bad'"),
        ("PIPELINE = 42\n", "'registry_case_bad' has no PIPELINE"),
        (
            "import dataclasses\nfrom workflows.llm.pipeline import PIPELINE as LLM\n"
            "PIPELINE = dataclasses.replace(LLM, name='documents')\n",
            "'documents' names both DocumentPipeline and AiOrchestrator",
        ),
    ],
)
def test_a_module_that_cannot_register_is_one_line(
    site: Path, source: str | None, message: str
) -> None:
    """A module that does not import, has no pipeline, or takes a name another pipeline has
    is a configuration error naming it."""
    if source is not None:
        (site / "registry_case_bad.py").write_text(source, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        pipelines.load(["registry_case_bad"])


def test_the_registry_runs_what_the_worker_installs_and_refuses_a_clash() -> None:
    """Workflow code sees the shipped pipelines until the worker installs its list; a list in
    which two pipelines share a name is refused and the installed one kept."""
    registry = RegisteredPipelines(SHIPPED)
    assert list(registry) == list(SHIPPED)
    registry.install([LLM])
    assert list(registry) == [LLM]
    with pytest.raises(GraphError, match="'llm' names both"):
        registry.install([LLM, dataclasses.replace(SHIPPED[1], name="llm")])
    assert list(registry) == [LLM]


def start(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(build_app("start"), ["start", *args, "--id", REQUEST_ID, "--print"])
    return done.exit_code, done.output


def test_start_asks_for_a_priority_and_batch_eligibility() -> None:
    """`start --priority 1 --batch-eligible` puts both in the request's options (without them:
    no priority, not eligible); a priority outside 1 to 5 is refused before anything starts."""
    code, output = start("hello", "--priority", "1", "--batch-eligible")
    assert code == 0, output
    assert json.loads(output)["options"] == {"priority": 1, "batch_eligible": True}
    code, output = start("hello")
    assert code == 0, output
    assert json.loads(output)["options"] == {"batch_eligible": False}
    code, output = start("hello", "--priority", "6")
    assert code == 2
    assert "--priority" in output and "less than or equal to 5" in output


def test_start_maps_the_message_or_input_onto_any_pipelines_request() -> None:
    """`start` fills the field the pipeline's shape names from the message, and takes the
    request's own fields from --input for a pipeline written in Python as for a file's."""
    code, output = start("hello")
    assert code == 0, output
    assert json.loads(output)["user_message"] == "hello"
    code, output = start("--pipeline", "llm", "--input", '{"user_message": "from input"}')
    assert code == 0, output
    assert json.loads(output)["user_message"] == "from input"
    code, output = start(
        "--pipeline",
        "documents",
        "--input",
        '{"document": "s3://b/k", "extraction_schema": "invoice"}',
    )
    assert code == 0, output
    assert (json.loads(output)["document"], json.loads(output)["extraction_schema"]) == (
        "s3://b/k",
        "invoice",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", '{"request_id": "x"}'], "--input may not set request_id"),
        (["hi", "--input", "{}"], "--input JSON gives the whole request"),
        (["--input", "[1]"], "--input must be a JSON object"),
        (["--input", '{"user_message": "hi", "extra": 1}'], "extra: Extra inputs"),
    ],
)
def test_start_refuses_what_does_not_fit_in_one_line(args: list[str], message: str) -> None:
    """A field the command's options set, a message beside --input, a non-object or a field
    the request does not have: one line, exit 1, nothing started."""
    code, output = start(*args)
    assert code == 1
    assert message in output
