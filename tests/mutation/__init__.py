"""``make mutate``: mutation testing of the modules that enforce security and the contract
(pyproject's ``[tool.mutmut]``; docs/mutation.md says how to read a run)."""
