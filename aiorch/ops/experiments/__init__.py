"""Rollout experiments for the operator's tools (docs/rollouts.md): each variant's runs and
signals from the ledger (`variant_signals`), the stop rule (`breaches`) and the watcher that
halts a losing variant on its own (`watch_once`), the halts the ledger recorded, and the
judges that score a sample of the completed runs (`judge_runs`, `sampled`)."""

from __future__ import annotations

from aiorch.ops.experiments._guardrail import (
    WATCHER,
    Breach,
    Notify,
    breaches,
    halt_notice,
    halt_variant,
    recorded_halts,
    watch_once,
)
from aiorch.ops.experiments._judges import (
    JudgeError,
    Judgement,
    judge_rules,
    judge_runs,
    record_judgement,
    sampled,
)
from aiorch.ops.experiments._signals import VariantSignals, variant_signals

__all__ = [
    "WATCHER",
    "Breach",
    "JudgeError",
    "Judgement",
    "Notify",
    "VariantSignals",
    "breaches",
    "halt_notice",
    "halt_variant",
    "judge_rules",
    "judge_runs",
    "record_judgement",
    "recorded_halts",
    "sampled",
    "variant_signals",
    "watch_once",
]
