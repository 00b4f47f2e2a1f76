"""Which recorded runs a lab run forks: the ``run_id`` column of the user's SQL over the run
ledger, run read-only (`aiorch.ops.ledger.read_only`, as ``aiorch ledger sql``), and at most
a limit of them, so a query that selects too much cannot start thousands of forks."""

from __future__ import annotations

from aiorch.ops import ledger

RUN_ID = "run_id"


class SelectionRefused(ValueError):
    """The statement selects no ``run_id`` column, or more runs than the limit (one line)."""


def selected_runs(url: str, statement: str, *, limit: int) -> list[str]:
    """The run ids ``statement`` selects from the ledger at ``url``, each once, in its order.

    Raises:
        NotReadOnly: the statement would change the ledger.
        QueryFailed: it did not run (the database's word).
        SelectionRefused: no ``run_id`` column, or more than ``limit`` runs.
    """
    answer = ledger.read_only(url, statement)
    if RUN_ID not in answer.columns:
        found = ", ".join(answer.columns) or "no columns"
        raise SelectionRefused(f"the query must return a {RUN_ID} column (it returned {found})")
    column = answer.columns.index(RUN_ID)
    run_ids = list(dict.fromkeys(str(row[column]) for row in answer.rows if row[column]))
    if len(run_ids) > limit:
        raise SelectionRefused(
            f"the query selected {len(run_ids)} runs, more than --limit {limit}: narrow it "
            "(WHERE, LIMIT) or raise --limit"
        )
    return run_ids
