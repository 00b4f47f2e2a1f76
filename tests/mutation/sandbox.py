"""A pytest plugin that only ``make mutate`` loads (``[tool.mutmut] pytest_add_cli_args``).

mutmut puts each mutated function behind a trampoline in its own module
(``mutmut.mutation.trampoline``), which reads the environment to pick the mutant under test. The
workflow tests run workflow code in the SDK's full sandbox, which would re-import that module for
every run and refuse its environment read, failing every run, mutant or not. So the sandbox
shares mutmut with the process, as it shares ``jwt`` and ``cryptography``; everything else stays
as the worker has it.
"""

from __future__ import annotations

from aiorch.runtime import sandbox

MUTMUT = "mutmut"

if MUTMUT not in sandbox.THIRD_PARTY_PASS_THROUGH:
    sandbox.THIRD_PARTY_PASS_THROUGH = (*sandbox.THIRD_PARTY_PASS_THROUGH, MUTMUT)
