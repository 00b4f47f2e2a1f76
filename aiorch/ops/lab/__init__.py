"""The replay lab: fork recorded runs from a state onto a candidate variant (and onto their own
settings, the baseline), and report what changed."""

from aiorch.ops.lab.forks import fork_id, run_forks

__all__ = ["fork_id", "run_forks"]
