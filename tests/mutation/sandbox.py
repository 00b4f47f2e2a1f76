"""A pytest plugin that only ``make mutate`` loads (``[tool.mutmut] pytest_add_cli_args``).

mutmut puts each mutated function behind a trampoline in its own module
(``mutmut.mutation.trampoline``), which reads the environment to pick the mutant under test. The
workflow tests run workflow code in the SDK's full sandbox, which would re-import that module for
every run and refuse its environment read, failing every run, mutant or not. So the sandbox
shares mutmut with the process, as it shares ``jwt`` and ``cryptography``; everything else stays
as the worker has it.

mutmut stops a mutant's tests at the first failure but hands pytest their ids in no particular
order, so the plugin also runs them cheapest tier first: a mutant a unit test kills is then
never run through a time-skipping server, and a surviving one runs the same tests either way.
"""

from __future__ import annotations

import pytest

from aiorch_runtime import sandbox

MUTMUT = "mutmut"
# From the cheapest tests to the dearest; a test in none of them runs last.
TIERS = ("tests/unit/", "tests/activities/", "tests/replay/", "tests/workflows/")

if MUTMUT not in sandbox.THIRD_PARTY_PASS_THROUGH:
    sandbox.THIRD_PARTY_PASS_THROUGH = (*sandbox.THIRD_PARTY_PASS_THROUGH, MUTMUT)


def tier(item: pytest.Item) -> int:
    return next(
        (rank for rank, prefix in enumerate(TIERS) if item.nodeid.startswith(prefix)), len(TIERS)
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=tier)
