"""The benchmark: ``python -m bench.run`` (``make bench``); see ``docs/performance.md``.

Not part of ``make test``: a bench run takes minutes and its figures depend on the machine.
``tests/e2e/test_bench.py`` runs it end to end at a tiny N to check that every figure is there.
"""
