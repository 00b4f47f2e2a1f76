"""Pipeline files are checked before anything runs: every problem with its file, line, column
and rule; a worker refuses to start with one; templates reach nothing but the run's data."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from aiorch.ops.pipelines import reserved_names
from aiorch.worker.app import run_worker
from aiorch_runtime.config import Settings
from aiorch_runtime.pipeline_files import (
    PipelineFilesInvalid,
    PipelineFolder,
    check_text,
    read_file,
)
from tests.support.pipeline_files import TRIAGE_V1, TRIAGE_V2, write_pipeline
from workflows.data import CATALOG, compile_spec, templates
from workflows.data.spec import PipelineSpec
from workflows.orchestrator import SHIPPED

HERE = Path(__file__).resolve().parent
BROKEN_DIR = HERE / "pipeline_files"
BROKEN = sorted(BROKEN_DIR.glob("*.yaml"))
ROOT = HERE.parents[1]


def expected(path: Path) -> set[tuple[int, str]]:
    """What a broken file's second line says it breaks: ``# expect: LINE:RULE ...``."""
    header = path.read_text(encoding="utf-8").splitlines()[1]
    assert header.startswith("# expect: "), path
    return {
        (int(line), rule)
        for line, rule in (item.split(":") for item in header.removeprefix("# expect: ").split())
    }


def test_there_are_broken_files_for_every_rule_that_matters() -> None:
    """At least fifteen broken files, covering each rule the check names."""
    assert len(BROKEN) >= 15
    rules = {rule for path in BROKEN for _, rule in expected(path)}
    assert {
        "unknown-step-type",
        "unknown-field",
        "missing-step",
        "unreachable-step",
        "dead-end",
        "invalid-json-schema",
        "unknown-template-field",
        "template-unsafe",
        "template-syntax",
        "yaml",
        "duplicate-key",
        "duplicate-state",
        "name-taken",
        "progress-goes-down",
        "unknown-case",
    } <= rules


@pytest.mark.parametrize("path", BROKEN, ids=lambda path: path.stem)
def test_a_broken_file_is_reported_with_its_line_and_rule(path: Path) -> None:
    """Each problem names the file, the line and column of what is wrong and the rule."""
    checked = read_file(path, CATALOG, reserved_names(SHIPPED))
    assert checked.record is None
    assert {(problem.line, problem.rule) for problem in checked.problems} == expected(path)
    for problem in checked.problems:
        assert problem.file == str(path)
        assert problem.column >= 1
        assert re.fullmatch(rf"{re.escape(str(path))}:\d+:\d+: [a-z-]+: .+", str(problem))


@pytest.mark.parametrize(
    ("name", "lines"),
    [
        (
            "07_unreachable_step.yaml",
            [
                "27:5: unreachable-step: no path from the start reaches step 'orphan' (nothing "
                "leads to it)"
            ],
        ),
        (
            "27_dead_end.yaml",
            [
                "18:5: dead-end: no path from step 'spin' reaches an end",
                "24:5: dead-end: no path from step 'turn' reaches an end",
            ],
        ),
    ],
)
def test_the_graphs_reachability_rules_name_the_step_in_the_file(
    name: str, lines: list[str]
) -> None:
    """A step nothing leads to, and steps from which no path ends (a cancel aside), are
    named at their id's line, in the file's order, with a sentence for a person."""
    path = next(path for path in BROKEN if path.name == name)
    checked = read_file(path, CATALOG, reserved_names(SHIPPED))
    assert [str(problem) for problem in checked.problems] == [f"{path}:{line}" for line in lines]


@pytest.mark.parametrize("path", BROKEN, ids=lambda path: path.stem)
async def test_a_worker_does_not_start_with_a_broken_file_in_its_folder(
    path: Path, tmp_path: Path
) -> None:
    """With any broken file in PIPELINES_DIR (beside a good one) the worker stops before it
    connects (so no run can start on it), and its one line names the file, line and rule."""
    write_pipeline(tmp_path, TRIAGE_V1)
    shutil.copy(path, tmp_path / path.name)
    # An address nothing listens on: had the worker tried to connect, it would say so instead.
    settings = Settings(pipelines_dir=tmp_path, temporal_address="127.0.0.1:9")
    with pytest.raises(PipelineFilesInvalid) as refused:
        await run_worker(settings)
    message = str(refused.value)
    assert "\n" not in message
    line, rule = min(expected(path))
    assert f"{tmp_path / path.name}:{line}:" in message
    assert rule in message


@pytest.mark.parametrize(
    "file",
    [
        ROOT / "pipelines" / "support_triage.yaml",
        *(ROOT / "pipelines" / "reference").glob("*.yaml"),
    ],
)
def test_the_shipped_pipeline_files_have_no_problem(file: Path) -> None:
    """The example and the reference files check clean (with no names taken)."""
    checked = read_file(file, CATALOG)
    assert checked.problems == ()


def test_a_key_is_its_text_not_yaml_1_1s_boolean() -> None:
    """`on:` is the key "on" (YAML 1.1 would read true), so branches parse as written."""
    text = TRIAGE_V1.replace("    next: draft\n", "    next: draft\n    on: {reject: store}\n", 1)
    record, problems = check_text(text, "f.yaml", CATALOG)
    assert problems == []
    assert record is not None
    review = next(step for step in record.spec.steps if step.id == "urgent_review")
    assert review.on == {"reject": "store"}


def test_only_a_review_that_takes_corrections_has_the_correct_outcome() -> None:
    """A review step without ``corrections`` has no ``correct`` outcome to route: naming one
    is refused at its line, with the outcomes it has."""
    text = TRIAGE_V1.replace("    next: draft\n", "    next: draft\n    on: {correct: store}\n", 1)
    _, problems = check_text(text, "f.yaml", CATALOG)
    assert [(p.line, p.rule, p.message) for p in problems] == [
        (
            44,
            "unknown-outcome",
            "a review step has no outcome 'correct' (outcomes: approve, reedit, reject)",
        )
    ]


async def test_the_folder_serves_a_changed_file_s_new_version(tmp_path: Path) -> None:
    """A file changed in place is read again: the next run gets the new version; the names
    include every pipeline the process served, so runs of a removed file still pass the
    activity caller check."""
    folder = PipelineFolder(tmp_path, CATALOG, reserved_names(SHIPPED))
    path = write_pipeline(tmp_path, TRIAGE_V1)
    first = await folder.get("SupportTriage")
    write_pipeline(tmp_path, TRIAGE_V2)
    second = await folder.get("SupportTriage")
    assert first is not None and second is not None
    assert (first.version, second.version) == ("1", "2")
    assert first.sha256 != second.sha256 and second.text == TRIAGE_V2
    path.unlink()
    assert await folder.get("SupportTriage") is None
    assert await folder.has("SupportTriage")


def test_two_files_of_one_name_are_both_refused(tmp_path: Path) -> None:
    """Two files naming one pipeline: the worker cannot tell which is meant."""
    write_pipeline(tmp_path, TRIAGE_V1, "a.yaml")
    write_pipeline(tmp_path, TRIAGE_V2, "b.yaml")
    with pytest.raises(PipelineFilesInvalid, match="duplicate-name"):
        PipelineFolder(tmp_path, CATALOG).check()


def _spec(prompt: str) -> PipelineSpec:
    data = yaml.safe_load(TRIAGE_V1)
    data["steps"][3]["prompt"] = prompt
    return PipelineSpec.model_validate(data)


@pytest.mark.parametrize(
    "attack",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ input.ticket.__class__ }}",
        "{{ input['__class__'] }}",
        "{{ self }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ lipsum.__globals__ }}",
        "{{ range(10) }}",
        "{{ input.ticket.format(input) }}",
        "{{ input|attr('__class__') }}",
        "{{ [1, 2]|random }}",
    ],
)
def test_a_template_that_reaches_python_internals_is_refused_at_check_time(attack: str) -> None:
    """Names other than input and steps, ``_`` attributes, calls and the attr and random
    filters are refused before any run."""
    record, problems = check_text(
        TRIAGE_V1.replace("{{ input.ticket }}", attack), "f.yaml", CATALOG
    )
    assert record is None
    assert {problem.rule for problem in problems} <= {
        "template-unsafe",
        "unknown-template-field",
        "template-syntax",
    }
    assert problems


@pytest.mark.parametrize(
    "attack",
    ["{{ ''.__class__.__mro__ }}", "{{ input.ticket.__class__.__name__ }}"],
)
def test_a_template_that_got_past_the_check_renders_nothing_harmful(attack: str) -> None:
    """A recorded spec compiles without the advisory checks inside a workflow: the sandbox
    refuses the same templates when they render (the run fails with one line)."""
    compiled = compile_spec(_spec(attack), CATALOG, strict=False)
    with pytest.raises(templates.RenderFailed, match="sandbox"):
        templates.render(compiled.template(attack), {"input": {"ticket": "t"}, "steps": {}})


def test_a_client_s_template_syntax_renders_as_text() -> None:
    """The input is data: its template syntax is put into the text, never evaluated."""
    prompt = "Ticket: {{ input.ticket }}"
    compiled = compile_spec(_spec(prompt), CATALOG)
    ticket = "{{ 7*7 }} {% if true %}yes{% endif %} {{ ''.__class__ }}"
    rendered = templates.render(
        compiled.template(prompt), {"input": {"ticket": ticket}, "steps": {}}
    )
    assert rendered == f"Ticket: {ticket}"


def test_a_version_read_as_a_number_is_quoted_as_the_file_wrote_it() -> None:
    """`version: 1.10` (which YAML reads as the number 1.1) is refused with a hint that quotes
    the file's own text, '1.10', never the number YAML made of it."""
    checked = read_file(BROKEN_DIR / "19_version_number.yaml", CATALOG, reserved_names(SHIPPED))
    [problem] = checked.problems
    assert (problem.line, problem.rule) == (4, "invalid-value")
    assert problem.message == "write it as a string ('1.10'), or YAML reads it as a number"


@pytest.mark.parametrize("step_type", ["fetch", "extract"])
def test_a_template_reads_what_a_document_step_records_and_nothing_else(step_type: str) -> None:
    """A template may read each field a fetch or extract step records; any other (the text,
    which is never recorded) is refused at its line, with the fields there are."""
    fields = ["kind", "characters", "pages", "sha256", "preview", "preview_truncated", "reference"]
    reads = " ".join(f"{{{{ steps.load.{name} }}}}" for name in fields)
    text = (
        "name: Loaded\nversion: 1\ninput:\n  type: object\n  properties:\n"
        "    document: {type: string}\nsteps:\n"
        f"  - id: load\n    type: {step_type}\n    document: input.document\n"
        f'  - id: tell\n    type: embed\n    text: "{reads}"\n'
        '  - id: again\n    type: embed\n    text: "{{ steps.load.text }}"\n'
    )
    _, problems = check_text(text, "loaded.yaml", CATALOG)
    assert [(p.line, p.rule, p.message) for p in problems] == [
        (
            16,
            "unknown-template-field",
            "step 'load''s output has no field 'text' (fields: characters, kind, pages, "
            "preview, preview_truncated, reference, sha256)",
        )
    ]
