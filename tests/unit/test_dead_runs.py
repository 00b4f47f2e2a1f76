"""How redrive reads a closed run's ending, and the start request id that makes it idempotent."""

from __future__ import annotations

from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, TerminatedError

from aiorch.ops.dead_runs import final_result, start_request_id
from tests.support.builders import REQUEST_ID, history_entry
from workflows.payloads import PipelineResult

DEAD = PipelineResult(
    request_id=REQUEST_ID,
    state="dead_letter",
    history=[history_entry("retry_llm", "dead_letter", "exhausted")],
).model_dump(mode="json")


def test_a_completed_run_ends_with_its_result() -> None:
    """A run that closed Completed ended with the PipelineResult it returned."""
    result = final_result(WorkflowExecutionStatus.COMPLETED, DEAD)
    assert result is not None and result.state == "dead_letter"


def test_a_failed_run_may_carry_its_result_in_the_failure_details() -> None:
    """A dead-lettered run closes Failed with the workflow's RunFailed error, which carries the
    PipelineResult in its details; any other failure (another type, even with a result in its
    details, which a client could forge by other means) carries none."""
    typed = ApplicationError("run ended in dead_letter", {"note": "first"}, DEAD, type="RunFailed")
    plain = ApplicationError("LlmPermanent: HTTP 400", type="LlmPermanent")
    other = ApplicationError("dead-lettered", DEAD, type="DeadLettered")

    result = final_result(WorkflowExecutionStatus.FAILED, WorkflowFailureError(cause=typed))

    assert result is not None and result.state == "dead_letter"
    assert final_result(WorkflowExecutionStatus.FAILED, WorkflowFailureError(cause=plain)) is None
    assert final_result(WorkflowExecutionStatus.FAILED, WorkflowFailureError(cause=other)) is None


def test_a_terminated_run_proves_nothing_whatever_its_details() -> None:
    """A client chooses a termination's details, so a PipelineResult in them is ignored; so is
    a Completed value that is no PipelineResult."""
    forged = WorkflowFailureError(cause=TerminatedError("by mallory", DEAD))

    assert final_result(WorkflowExecutionStatus.TERMINATED, forged) is None
    assert final_result(WorkflowExecutionStatus.FAILED, forged) is None
    assert final_result(WorkflowExecutionStatus.COMPLETED, {"state": "dead_letter"}) is None


def test_start_request_id_is_one_per_dead_run() -> None:
    """Every operator derives the same start request id for one dead run, and different ones
    for different runs, namespaces or workflow ids."""
    one = start_request_id("default", "w1", "run-1")

    assert one == start_request_id("default", "w1", "run-1")
    assert (
        len(
            {
                one,
                *(
                    start_request_id(*x)
                    for x in [
                        ("prod", "w1", "run-1"),
                        ("default", "w2", "run-1"),
                        ("default", "w1", "run-2"),
                    ]
                ),
            }
        )
        == 4
    )
