"""plan_pipeline and notify_pipeline in Temporal's activity environment: the plan a run starts
with (its version, its input checked, each review step's policy) read from a real folder, and
a notify step's webhook call to a real receiver on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from pydantic import SecretStr
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.notify import NotifyActivities, webhook
from activities.pipelines import PipelineActivities
from activities.planning import PlanDefaults
from aiorch_runtime.config import Settings
from aiorch_runtime.pipeline_files import PipelineFolder
from tests.support.pipeline_files import TRIAGE, TRIAGE_V1, write_pipeline
from tests.support.webhooks import Receiver, running_receiver
from workflows import errors
from workflows.data import CATALOG, DataPlan, PipelineNotice, PlanPipelineInput

REQUEST_ID = "0123456789abcdef01234567"
WITH_POLICY = TRIAGE_V1.replace(
    "    description: a person checks the drafted reply\n",
    "    description: a person checks the drafted reply\n"
    "    timeout_s: 120\n"
    "    escalation_timeout_s: 7200\n"
    "    reviewers: [rita, sam]\n",
)


def activities(folder: Path, **settings: Any) -> PipelineActivities:
    values = {"review_timeout_s": 600.0, "escalation_timeout_s": 3600.0, **settings}
    return PipelineActivities(
        PlanDefaults.of(Settings(**values)),
        PipelineFolder(folder, CATALOG),
        CATALOG,
        ["AiOrchestrator"],
    )


async def plan(plans: PipelineActivities, pipeline: str = TRIAGE, **request: Any) -> DataPlan:
    payload = {"request_id": REQUEST_ID, "input": {"ticket": "charged twice"}, **request}
    given = PlanPipelineInput(pipeline=pipeline, request=payload)
    plan: DataPlan = await ActivityEnvironment().run(plans.plan_pipeline, given)
    return plan


async def test_the_plan_holds_the_file_s_version_and_each_review_s_policy(tmp_path: Path) -> None:
    """The plan carries the file's text, hash and spec, and each review step's timeouts (the
    step's replacing the worker's, a request's lowering them) and reviewers (narrowed by the
    step)."""
    path = write_pipeline(tmp_path, WITH_POLICY)
    plans = activities(tmp_path, allowed_reviewers="rita,sam,tom")
    planned = await plan(plans, options={"review_timeout_s": 60})
    assert planned.pipeline.text == path.read_text(encoding="utf-8")
    assert planned.pipeline.label.startswith("1@")
    assert planned.pipeline.spec.steps[0].id == "classify"
    urgent, reply = planned.reviews["urgent_review"], planned.reviews["reply_review"]
    assert (urgent.review_timeout_s, urgent.escalation_timeout_s) == (60, 3600)
    assert (reply.review_timeout_s, reply.escalation_timeout_s) == (60, 7200)
    assert urgent.allowed_reviewers == ["rita", "sam", "tom"]
    assert reply.allowed_reviewers == ["rita", "sam"]
    assert planned.input_digest and planned.model == Settings().llm_model


@pytest.mark.parametrize(
    ("request_fields", "message"),
    [
        ({"pipeline": "Missing"}, "this worker runs AiOrchestrator, SupportTriage, not Missing"),
        ({"input": {"ticket": 7}}, "input.ticket: 7 is not of type 'string'"),
        ({"plan": {"model": "mine"}}, "plan: Extra inputs are not permitted"),
        ({"options": {"allowed_reviewers": ["tom"]}}, "review step reply_review"),
    ],
)
async def test_a_start_the_file_does_not_take_is_refused_for_good(
    tmp_path: Path, request_fields: dict[str, Any], message: str
) -> None:
    """No such pipeline, an input the file's schema refuses, a field the request does not
    have, reviewers a review step leaves nobody of: non-retryable InvalidRequest, one line."""
    write_pipeline(tmp_path, WITH_POLICY)
    plans = activities(tmp_path, allowed_reviewers="rita,sam,tom")
    with pytest.raises(ApplicationError) as refused:
        await plan(plans, **request_fields)
    assert (refused.value.type, refused.value.non_retryable) == (errors.INVALID_REQUEST, True)
    assert message in refused.value.message
    assert "\n" not in refused.value.message


async def test_a_file_with_a_problem_fails_the_runs_it_would_start(tmp_path: Path) -> None:
    """A file that became invalid after the worker started: runs of it are refused with the
    problem (file, line, rule), until it is fixed."""
    write_pipeline(tmp_path, TRIAGE_V1.replace("type: store", "type: stash"))
    with pytest.raises(ApplicationError, match=r"support_triage.yaml:\d+:\d+: unknown-step-type"):
        await plan(activities(tmp_path))


@pytest_asyncio.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with running_receiver() as running:
        yield running


NOTICE = PipelineNotice(
    workflow_id=REQUEST_ID,
    run_id="run-1",
    pipeline=TRIAGE,
    version="1@3eaf0cfef5b7",
    step="tell_support",
    message="a reply was approved <!channel>",
)


async def test_a_notify_step_posts_ids_and_the_file_s_text_only(
    receiver: Receiver, tmp_path: Path
) -> None:
    """The webhook gets the run, the pipeline's version, the step and the file's message
    (JSON; in Slack's format with its markup escaped), never the run's content."""
    for fmt in ("json", "slack"):
        config = Settings(
            review_webhook_url=SecretStr(receiver.url),
            review_webhook_format=fmt,
            temporal_ui_url="https://temporal.example.com",
        )
        async with aiohttp.ClientSession() as session:
            plans = PipelineActivities(
                PlanDefaults.of(config),
                None,
                CATALOG,
                [],
                NotifyActivities(webhook(config), session),
            )
            assert await ActivityEnvironment().run(plans.notify_pipeline, NOTICE) == 200
    (json_headers, json_body), (_, slack_body) = receiver.calls
    assert json_body["event"] == "pipeline_step"
    assert (json_body["pipeline"], json_body["version"], json_body["step"]) == (
        TRIAGE,
        "1@3eaf0cfef5b7",
        "tell_support",
    )
    assert json_headers["Idempotency-Key"] == f"{REQUEST_ID}:tell_support"
    assert "&lt;!channel&gt;" in slack_body["blocks"][0]["text"]["text"]
    assert "<!channel>" not in slack_body["blocks"][0]["text"]["text"]
