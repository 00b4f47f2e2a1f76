"""The replay lab's workflow: the engine's workflow as a fork runs it, on the lab's task queue.

A fork (``workflows.engine.forks.ForkInput``) walks its original's pipeline graph as any run
does, with four differences, all here:

- **Seeded**: until it enters its fork state, every activity it would schedule is answered
  from the original's recorded outputs (``workflows.engine.seeding``); planning's local
  activities run again (they do no I/O). It enters the fork state with the original's
  fetched input, extracted text and model answers, and makes no call before it.
- **Its own plan**: right after the run is planned the candidate's ``Variant`` is applied
  (the baseline applies none), and the plan's tenant becomes the lab's (its spend is counted
  apart), notifications and the result cache go off, and calls take the synchronous lane.
- **No waits on people**: where the run would wait for a reviewer, an escalation or a budget
  decision, the fork records where and why and ends there (``ForkResult.waits``).
- **Unseen**: it publishes no ``AiState``, so no inbox or operator's list shows it (they list
  the production task queue's runs only, too).

Only this class accepts a fork's input, and it accepts nothing else; the activities on the
lab's queue are dry where they would write (``activities.lab``).

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

import workflows.engine.planning as planning
import workflows.errors as errors
from workflows.engine.forks import ForkInput, ForkResult, is_fork_input
from workflows.engine.graph import Role
from workflows.engine.pipeline import Context
from workflows.engine.seeding import ForkDiverged, Seed
from workflows.engine.workflow import Handler, PipelineWorkflow
from workflows.payloads import describe_validation_error

# Where a run would wait for a person: a fork ends there instead.
_WAITS_ON_PEOPLE = frozenset({Role.REVIEW, Role.ESCALATION, Role.BUDGET})
# What every fork's plan says whatever the original's did: no notifications, no answers from
# the result cache (a baseline would get the original's), no day-long batch waits.
_FORK_PLAN = {"notify": False, "result_cache": False, "lane": "sync"}


class ForkEnded(Exception):
    """The fork reached a state where its run would wait for a person: ``why`` says which
    and what for."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class LabWorkflow(PipelineWorkflow):
    """Walks a fork of a recorded run from its fork state (see the module docstring)."""

    # Set from the fork's input when the run is constructed; read by commands.execute.
    seed: Seed | None = None
    _fork: ForkInput | None = None

    def _start_input(self, raw: Any) -> Any:
        if not is_fork_input(raw):
            raise errors.InvalidRequest("the lab's task queue runs lab forks only")
        try:
            fork = ForkInput.model_validate(raw)
        except ValidationError as err:
            raise errors.InvalidRequest(describe_validation_error(err)) from None
        self._fork, self.seed = fork, Seed(fork.recorded)
        return fork.request

    async def fork(self) -> ForkResult:
        """The fork: walk from the start, seeded up to the fork state; end where it would wait.

        Raises:
            ApplicationError: ``InvalidRequest``: the fork's input was refused.
        """
        waits: list[str] = []
        error: str | None = None
        try:
            await self.walk()
        except ForkEnded as ended:
            waits.append(ended.why)
        except ForkDiverged as err:
            error = f"ForkDiverged: {err}"
        except ApplicationError as err:
            if err.type != errors.RUN_FAILED:
                raise
            error = self._context().run.last_error or str(err)
        return self._outcome(waits, error)

    async def _admit(self) -> Context[Any, Any]:
        """Admit the fork as any run, then have the worker vouch for its start as it vouches
        for a run's (``plan_run``: with start authentication on, the fork's request must carry
        a start claim for it). A pipeline's plan may come from the seed, its check with it, so
        the check is made here; a pipeline file's plan is never seeded (a local activity)."""
        ctx = await super()._admit()
        if self._source is None:
            await planning.plan_run(self._require_pipeline().name, ctx.request)
        return ctx

    def _handler(self, state: str) -> Handler:
        fork, seed = self._require_fork(), self.seed
        if state == fork.from_state and seed is not None:
            seed.end()
        if self._context().graph.info(state).role in _WAITS_ON_PEOPLE:
            return self._would_wait
        return self._planning(super()._handler(state))

    def _publish(self) -> None:
        """A fork shows in no list of runs: it publishes no search attributes."""

    def _planning(self, handler: Handler) -> Handler:
        async def planned(ctx: Context[Any, Any]) -> None:
            unplanned = ctx.run.plan is None
            await handler(ctx)
            if unplanned and ctx.run.plan is not None:
                ctx.run.plan = self._fork_plan(ctx.run.plan)

        return planned

    def _fork_plan(self, plan: Any) -> Any:
        """``plan`` as the fork runs it: the candidate's variant applied, the lab's tenant."""
        fork = self._require_fork()
        # The original's rollout variant first (a fork's own plan never chooses one), so the
        # baseline runs the original's settings and the candidate changes them.
        if fork.assignment is not None:
            plan = fork.assignment.variant.applied(plan)
            plan = plan.model_copy(update={"assignment": fork.assignment})
        if fork.variant is not None:
            plan = fork.variant.applied(plan)
        settings = {**_FORK_PLAN, "tenant": fork.tenant}
        fields = type(plan).model_fields
        return plan.model_copy(update={k: v for k, v in settings.items() if k in fields})

    async def _would_wait(self, ctx: Context[Any, Any]) -> None:
        run = ctx.run
        role = ctx.graph.info(run.state).role
        if role == Role.BUDGET:
            raise ForkEnded(f"{run.state}: a budget decision ({run.last_error or 'over budget'})")
        headline = self._require_pipeline().review_view(ctx).headline
        raise ForkEnded(f"{run.state} (round {run.review_round}): {headline}")

    def _outcome(self, waits: list[str], error: str | None) -> ForkResult:
        ctx = self._context()
        run, subject = ctx.run, ctx.subject()
        problems = self._require_pipeline().review_view(ctx).problems
        return ForkResult(
            state=run.state,
            model=run.model,
            text=subject.text,
            fields=dict(subject.fields) if subject.fields is not None else None,
            problems=list(problems),
            needs_review=bool(waits),
            waits=waits,
            error=error,
        )

    def _require_fork(self) -> ForkInput:
        if self._fork is None:
            raise errors.InvalidTransition("idle", "(no fork)", "input not admitted")
        return self._fork
