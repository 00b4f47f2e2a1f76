"""Attacks on a worker's pipeline folder with files that are small but expand without bound,
as someone who may contribute one file would try them: an alias inside its own anchor, nested
aliases ("billion laughs"), merge keys that double at each level, nesting past the reader's
recursion, a template nested past Jinja2's parser. Each is a problem of its own file, with its
line, found in well under a second, and every other pipeline's runs start and complete."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from temporalio.client import Client
from typer.testing import CliRunner

from aiorch.cli import build_app
from aiorch.devstack.stack import LocalStack
from aiorch.ops.pipelines import reserved_names
from aiorch_runtime.pipeline_files import PipelineFolder, check_text
from tests.support.builders import new_request_id
from tests.support.live_runs import wait_for_state
from tests.support.live_stack import E2E_WORKER_ENV, run_script
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, write_pipeline
from workflows import contract
from workflows.data import CATALOG, DataResult
from workflows.orchestrator import SHIPPED

pytestmark = pytest.mark.e2e

# 24 bytes: the list holds itself, so expanding it never ends.
RECURSIVE = "name: Helper\nx: &a [*a]\n"
# About 400 bytes whose last line expands to ten to the eighth power strings.
LAUGHS = "".join(
    [
        "name: Laughs\na: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol,lol]\n",
        *(
            f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n"
            for a, b in zip("abcdefg", "bcdefgh", strict=True)
        ),
    ]
)
# Each level merges the one before twice: 2**40 keys from a kilobyte.
MERGES = "a0: &a0 {k: 1, j: 2}\n" + "".join(
    f"a{n}: &a{n} {{<<: [*a{n - 1}, *a{n - 1}]}}\n" for n in range(1, 41)
)
# Each alias holds the one before: nested 2,000 levels deep once expanded.
CHAIN = "a0: &a0 [1]\n" + "".join(f"a{n}: &a{n} [*a{n - 1}]\n" for n in range(1, 2000))
# Nested 20,000 levels as written: PyYAML's composer recurses once per level.
DEEP = "x: " + "[" * 20_000 + "]" * 20_000 + "\n"
# The bar for the check, in this thread's CPU time with the collector paused: what the
# reading itself costs, whatever else the machine, this test process's other threads (an xdist
# worker keeps the SDK's runtime threads of earlier tests) or its heap cost. Unbounded, the
# laughs alone took minutes.
FAST_S = 1.0

T = TypeVar("T")


def cpu_spent_on(call: Callable[[], T]) -> tuple[T, float]:
    """What ``call`` returns and the CPU seconds this thread spent on it, the collector paused."""
    gc.disable()
    try:
        started = time.thread_time()
        result = call()
        return result, time.thread_time() - started
    finally:
        gc.enable()


def problems_of(text: str) -> list[tuple[int, str, str]]:
    """The problems of ``text`` as a pipeline file, checked within ``FAST_S``."""
    (record, problems), spent = cpu_spent_on(
        lambda: check_text(text, "contributed.yaml", CATALOG, reserved_names(SHIPPED))
    )
    assert spent < FAST_S
    assert record is None
    return [(problem.line, problem.rule, problem.message) for problem in problems]


def test_an_alias_inside_its_own_anchor_is_a_yaml_problem_at_its_line() -> None:
    """``x: &a [*a]`` is refused as a YAML problem on line 2, not a RecursionError."""
    assert len(RECURSIVE) < 40
    assert problems_of(RECURSIVE) == [(2, "yaml", "an alias refers to a value that holds it")]


def test_nested_aliases_are_refused_before_they_are_expanded() -> None:
    """A 400-byte billion laughs is refused at the line whose alias passes the budget, in
    milliseconds (PyYAML alone would build 10**8 strings)."""
    assert len(LAUGHS.encode()) < 450
    [(line, rule, message)] = problems_of(LAUGHS)
    assert rule == "file-too-large" and "expand to more than 100000 values" in message
    assert 2 < line <= LAUGHS.count("\n")


def test_merge_keys_that_double_at_each_level_are_refused() -> None:
    """``<<: [*a, *a]`` forty levels deep is counted as what it merges, and refused."""
    [(_, rule, message)] = problems_of(MERGES)
    assert rule == "file-too-large" and "expand to more than" in message


def test_aliases_that_nest_past_the_depth_limit_are_refused() -> None:
    """An alias chain nesting 2,000 levels is refused at the level that passes 40."""
    [(line, rule, message)] = problems_of(CHAIN)
    assert (line, rule) == (40, "file-too-large") and "more than 40 levels" in message


def test_text_nested_past_the_composer_is_refused_with_its_line() -> None:
    """Twenty thousand nested brackets stop at level 40, on line 1, as a file problem."""
    [(line, rule, message)] = problems_of(DEEP)
    assert (line, rule) == (1, "file-too-large") and "more than 40 levels" in message


def test_a_template_nested_past_jinja_s_parser_is_a_template_problem() -> None:
    """Five thousand nested parentheses in a prompt: a template problem at the template's
    first line, where Jinja2's parser alone would raise RecursionError."""
    nested = "(" * 5_000 + "input.ticket" + ")" * 5_000
    text = TRIAGE_V1.replace("{{ input.ticket }}", "{{ " + nested + " }}", 1)
    assert text != TRIAGE_V1
    [(line, rule, message)] = problems_of(text)
    assert rule == "template-syntax" and message == "expressions nest too deeply"
    assert "Sort this support ticket" in text.splitlines()[line - 1]


@pytest.fixture
def bombed(tmp_path: Path) -> Path:
    """A pipeline folder with the triage file and the two bombs beside it."""
    write_pipeline(tmp_path, TRIAGE_V1)
    write_pipeline(tmp_path, RECURSIVE, "zz_helper.yaml")
    write_pipeline(tmp_path, LAUGHS, "laughs.yaml")
    return tmp_path


def test_pipeline_check_names_both_bombs_in_under_a_second(bombed: Path) -> None:
    """``aiorch pipeline check`` on the folder exits 1 (no traceback) with one line for each
    bomb, names the triage file ok, and takes under a second."""
    done, spent = cpu_spent_on(
        lambda: CliRunner().invoke(build_app("pipeline"), ["pipeline", "check", str(bombed)])
    )
    assert spent < FAST_S
    # A crash would also exit 1, with the exception kept; a clean refusal exits through Exit.
    assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
    lines = done.output.splitlines()
    assert f"{bombed / 'zz_helper.yaml'}:2:4: yaml: an alias refers to a value" in done.output
    assert any(
        line.startswith(f"{bombed / 'laughs.yaml'}:") and "file-too-large" in line for line in lines
    )
    assert f"{bombed / 'support_triage.yaml'}: ok (SupportTriage" in done.output


async def test_the_folder_serves_every_other_pipeline_beside_the_bombs(bombed: Path) -> None:
    """A worker's folder read gives the triage pipeline, with both bombs listed as problems
    of their own files, in under a second."""
    folder = PipelineFolder(bombed, CATALOG, reserved_names(SHIPPED))
    started = time.process_time()
    record = await folder.get(TRIAGE)
    assert time.process_time() - started < FAST_S
    assert record is not None and record.name == TRIAGE
    problems = {Path(problem.file).name for problem in (await folder.current()).problems}
    assert problems == {"zz_helper.yaml", "laughs.yaml"}


@pytest.fixture(scope="module")
def live_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pipelines")
    write_pipeline(path, TRIAGE_V1)
    return path


@pytest.fixture(scope="module")
def worker_env(live_folder: Path) -> dict[str, str]:
    return {**E2E_WORKER_ENV, "PIPELINES_DIR": str(live_folder)}


@pytest.mark.e2e
async def test_runs_of_another_pipeline_complete_after_bombs_are_dropped_in(
    stack: LocalStack, client: Client, live_folder: Path
) -> None:
    """Both bombs dropped into a running worker's PIPELINES_DIR: a triage run started after
    them plans, calls the model, waits for its review and completes once approved."""
    write_pipeline(live_folder, RECURSIVE, "zz_helper.yaml")
    write_pipeline(live_folder, LAUGHS, "laughs.yaml")
    request_id = new_request_id()
    handle = await client.start_workflow(
        TRIAGE,
        {"request_id": request_id, "input": {"ticket": "Where is my invoice?"}},
        id=request_id,
        task_queue=contract.DEFAULT_TASK_QUEUE,
        result_type=DataResult,
    )
    await wait_for_state(handle, "reply_review")
    env = {**stack.addresses.env(), "PIPELINES_DIR": str(live_folder)}
    reviewed = run_script(
        "starter.py", "review", request_id, "approve", "--reviewer", "rita", env=env
    )
    assert reviewed.returncode == 0, reviewed.stderr
    result = await asyncio.wait_for(handle.result(), timeout=30)
    assert result.history[-1].to_state == "completed"
