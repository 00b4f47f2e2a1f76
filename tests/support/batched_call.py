"""A run's model call through the batch lane, as the LLM pipeline makes it, in a module of its
own (the sandbox imports a workflow's module afresh for every run, so it imports workflow code
only): ``invoke_llm`` comes back once the call's batch is submitted, then ``await_batch`` waits
for the call's outcome. The test's ``invoke_llm`` is `BatchLane.enqueue` with no spend
reservation."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from workflows import contract
from workflows.payloads import AwaitBatchInput, LlmCallInput, LlmCallResult

ONCE = RetryPolicy(maximum_attempts=1)


@workflow.defn(name="BatchedCall")
class BatchedCall:
    """What the run was told when its batch was submitted, and the outcome it then took (the
    same, when the call was failed instead of batched)."""

    @workflow.run
    async def run(self, call: LlmCallInput) -> tuple[LlmCallResult, LlmCallResult]:
        submitted = await workflow.execute_activity(
            contract.ACTIVITY_INVOKE_LLM,
            call,
            result_type=LlmCallResult,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=ONCE,
        )
        if submitted.batch_item is None or submitted.batch_id is None:
            return submitted, submitted
        outcome = await workflow.execute_activity(
            contract.ACTIVITY_AWAIT_BATCH,
            AwaitBatchInput(
                item=submitted.batch_item, model=call.model, batch_id=submitted.batch_id
            ),
            result_type=LlmCallResult,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=ONCE,
        )
        return submitted, outcome
