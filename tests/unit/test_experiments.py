"""Rollout experiments as the operator writes them (``EXPERIMENTS``) and the choice of a run's
variant: deterministic from the workflow id, split by weight, a halted variant's runs going to
the control, and a variant applied to the plan when its prompt is added."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiorch_runtime.config import ConfigError, Settings, load_settings
from aiorch_runtime.experiments import Experiment, check_pipelines, experiment_for
from tests.support.builders import prompt_plan
from workflows.engine import record
from workflows.engine.planning import RunPlan, with_prompt
from workflows.llm.graph import GRAPH, State
from workflows.payloads import Assignment, PromptPlan, RunState, Variant

STORE = "redis://127.0.0.1:1/0"
CANARY: dict[str, Any] = {
    "id": "prompt-v2",
    "variants": [
        {"name": "A", "weight": 90},
        {"name": "B", "weight": 10, "model": "sim-b", "system_prompt": "Answer tersely."},
    ],
}


def canary(**changes: Any) -> Experiment:
    return Experiment.model_validate({**CANARY, **changes})


def test_the_same_workflow_id_always_gets_the_same_variant() -> None:
    """The choice is a function of the experiment id and the workflow id alone: asked again
    (another worker, a replayed plan), the same id gets the same variant; another experiment
    id splits the same runs differently."""
    experiment = canary(variants=[{"name": "A", "weight": 1}, {"name": "B", "weight": 1}])
    ids = [f"run-{n}" for n in range(200)]
    first = [experiment.choose(workflow_id).variant.name for workflow_id in ids]
    again = [experiment.choose(workflow_id).variant.name for workflow_id in ids]
    other = canary(id="prompt-v3", variants=experiment.model_dump()["variants"])
    assert first == again
    assert first != [other.choose(workflow_id).variant.name for workflow_id in ids]


def test_the_runs_split_by_weight() -> None:
    """Over many runs each variant's share follows its weight (10 % canary: between 8 % and
    12 % of 5000 runs), and a variant of weight 0 gets none."""
    experiment = canary(
        variants=[*CANARY["variants"], {"name": "C", "weight": 0, "temperature": 0.0}]
    )
    names = [experiment.choose(f"{n:024x}").variant.name for n in range(5000)]
    assert 0.08 < names.count("B") / len(names) < 0.12
    assert names.count("C") == 0
    assert names.count("A") + names.count("B") == len(names)


def test_a_halted_variants_runs_get_the_control_and_a_promoted_one_gets_all() -> None:
    """Halting B sends exactly B's runs to the control (A's keep A); promoting B gives every
    run B, unless B is halted."""
    experiment = canary()
    ids = [f"{n:024x}" for n in range(1000)]
    before = {i: experiment.choose(i).variant.name for i in ids}
    halted = {i: experiment.choose(i, halted={"B"}).variant.name for i in ids}
    assert set(halted.values()) == {"A"}
    assert "B" in before.values()
    assert {experiment.choose(i, promoted="B").variant.name for i in ids} == {"B"}
    assert {experiment.choose(i, promoted="B", halted={"B"}).variant.name for i in ids} == {"A"}


def test_an_assignment_records_the_variant_and_its_changes() -> None:
    """The assignment names the experiment and holds the variant without its weight, so the
    plan records what the run was changed by."""
    workflow_id = next(
        f"{n:024x}" for n in range(1000) if canary().choose(f"{n:024x}").variant.name == "B"
    )
    assignment = canary().choose(workflow_id)
    assert assignment.experiment == "prompt-v2"
    assert assignment.variant == Variant(name="B", model="sim-b", system_prompt="Answer tersely.")
    assert assignment.describe() == "prompt-v2/B: model='sim-b', system_prompt='Answer tersely.'"


def test_with_prompt_applies_the_assigned_variant_once_the_prompt_is_built() -> None:
    """A plan assigned B runs B's model and system prompt over the prompt its pipeline built
    (the user's prompt stays); a plan without an assignment is built exactly as before."""
    plan = RunPlan(
        model="sim-default", review_timeout_s=60, escalation_timeout_s=60, max_attempts=3
    )
    prompt = {"system_prompt": "You are helpful.", "user_prompt": "hello"}
    plain = with_prompt(plan, PromptPlan, **prompt)
    assignment = Assignment(
        experiment="prompt-v2", variant=Variant(name="B", model="sim-b", system_prompt="Terse.")
    )
    changed = with_prompt(plan.model_copy(update={"assignment": assignment}), PromptPlan, **prompt)
    assert (plain.model, plain.system_prompt, plain.assignment) == (
        "sim-default",
        "You are helpful.",
        None,
    )
    assert (changed.model, changed.system_prompt, changed.user_prompt) == (
        "sim-b",
        "Terse.",
        "hello",
    )
    assert changed.assignment == assignment


def test_a_tenants_experiment_comes_before_its_pipelines() -> None:
    """``llm@acme`` covers acme's runs of ``llm``; other tenants get ``llm``'s; a pipeline
    without one gets none."""
    settings = Settings(
        capacity_store_url=STORE,
        experiments=json.dumps({"llm": CANARY, "llm@acme": {**CANARY, "id": "acme-v2"}}),
    )
    assert experiment_for(settings.experiments, "llm", "acme").id == "acme-v2"  # type: ignore[union-attr]
    assert experiment_for(settings.experiments, "llm", "default").id == "prompt-v2"  # type: ignore[union-attr]
    assert experiment_for(settings.experiments, "documents", "acme") is None


def test_experiments_are_read_from_a_file(tmp_path: Path) -> None:
    """``EXPERIMENTS`` may name a JSON file instead of holding the JSON."""
    path = tmp_path / "experiments.json"
    path.write_text(json.dumps({"llm": CANARY}), encoding="utf-8")
    settings = Settings(capacity_store_url=STORE, experiments=str(path))
    assert settings.experiments["llm"] == canary()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("/nowhere/experiments.json", "neither JSON nor a readable file"),
        ('{"llm": ', "not valid JSON"),
        (
            json.dumps({"llm": {**CANARY, "variants": CANARY["variants"][::-1]}}),
            "the first variant (B) is the control: it must change nothing",
        ),
        (
            json.dumps({"llm": {**CANARY, "variants": [CANARY["variants"][0]] * 2}}),
            "variant names repeat: A, A",
        ),
        (
            json.dumps({"llm": {**CANARY, "variants": [{"name": "A", "weight": 0}] * 1}}),
            "at least 2 items",
        ),
        (
            json.dumps(
                {
                    "llm": {
                        **CANARY,
                        "variants": [{"name": "A", "weight": 0}, {"name": "B", "weight": 0}],
                    }
                }
            ),
            "the weights add up to 0",
        ),
        (
            json.dumps({"llm": CANARY, "documents": CANARY}),
            "experiment id 'prompt-v2' is used by llm",
        ),
        (json.dumps({"llm@a:b": CANARY}), "is not a pipeline or pipeline@tenant"),
        (json.dumps({"llm": {**CANARY, "variant": []}}), "Extra inputs are not permitted"),
        (
            json.dumps({"llm": {**CANARY, "variants": [{"weight": 1}, {"weight": 1}]}}),
            "EXPERIMENTS.LLM.VARIANTS.0.NAME={'weight': 1}: Field required",
        ),
        (
            json.dumps({"llm": {**CANARY, "stop": {"signal": "scores"}}}),
            "'problem', 'correction', 'rejection' or 'score_fail'",
        ),
        (
            json.dumps({"llm": {**CANARY, "stop": {"signal": "score_fail"}}}),
            "the stop rule reads score_fail: give the experiment a judge",
        ),
        (
            json.dumps({"llm": {**CANARY, "judge": {"rule": "problems == 0", "sample": 1.5}}}),
            "EXPERIMENTS.LLM.JUDGE.SAMPLE=1.5: Input should be less than or equal to 1",
        ),
    ],
)
def test_a_bad_experiment_stops_the_worker_with_one_line(
    monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    """A worker refuses to start on experiments it cannot run, with one line naming
    ``EXPERIMENTS`` and what is wrong."""
    monkeypatch.setenv("CAPACITY_STORE_URL", STORE)
    monkeypatch.setenv("EXPERIMENTS", value)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    message = str(raised.value)
    assert "EXPERIMENTS" in message
    assert problem in message


def test_experiments_need_the_capacity_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The halts live in the capacity store, so experiments without ``CAPACITY_STORE_URL``
    are refused at start."""
    monkeypatch.delenv("CAPACITY_STORE_URL", raising=False)
    monkeypatch.setenv("EXPERIMENTS", json.dumps({"llm": CANARY}))
    with pytest.raises(ConfigError, match="EXPERIMENTS keep their halts in the capacity store"):
        load_settings()


def test_the_variant_shows_in_status_and_the_web_uis_details() -> None:
    """A run planned under an experiment shows ``EXPERIMENT/VARIANT`` in its ``status``
    answer and its Web UI details line; a run planned under none shows no variant."""
    assignment = Assignment(experiment="prompt-v2", variant=Variant(name="B", model="sim-b"))
    assigned = RunState(
        state=State.INVOKE_LLM, plan=prompt_plan().model_copy(update={"assignment": assignment})
    )
    plain = RunState(state=State.INVOKE_LLM, plan=prompt_plan())
    assert record.status(GRAPH, assigned).variant == "prompt-v2/B"
    assert "variant prompt-v2/B" in record.details(GRAPH, assigned)
    assert record.status(GRAPH, plain).variant is None
    assert "variant" not in record.details(GRAPH, plain)


def test_an_experiment_for_a_pipeline_the_worker_lacks_stops_it() -> None:
    """An experiment keyed by a pipeline the worker neither runs in Python nor has a file for
    would never apply, and one that sets a prompt for a pipeline file (whose steps write their
    own) would not do what it says: the worker refuses to start, naming what is wrong."""
    model_only = canary(
        id="triage-v2",
        variants=[{"name": "A", "weight": 1}, {"name": "B", "weight": 1, "model": "m"}],
    )
    experiments = {"llm@acme": canary(), "SupportTriage": model_only}
    check_pipelines(experiments, ["llm", "documents"], ["SupportTriage"])
    with pytest.raises(ConfigError) as raised:
        check_pipelines(experiments, ["llm", "documents"], [])
    assert str(raised.value) == (
        "EXPERIMENTS: 'SupportTriage' names no pipeline of this worker (llm, documents)"
    )
    with pytest.raises(ConfigError, match="variant B sets a prompt, and the steps of pipeline"):
        check_pipelines({"SupportTriage": canary()}, ["llm"], ["SupportTriage"])
