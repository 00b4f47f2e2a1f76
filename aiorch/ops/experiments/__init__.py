"""Rollout experiments for the operator's tools (docs/rollouts.md): each variant's runs and
signals from the ledger (`variant_signals`), the stop rule (`breaches`) and the watcher that
halts a losing variant on its own (`watch_once`), and the halts the ledger recorded."""

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
from aiorch.ops.experiments._signals import VariantSignals, variant_signals

__all__ = [
    "WATCHER",
    "Breach",
    "Notify",
    "VariantSignals",
    "breaches",
    "halt_notice",
    "halt_variant",
    "recorded_halts",
    "variant_signals",
    "watch_once",
]
