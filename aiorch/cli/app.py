"""The ``aiorch`` command line (``python starter.py``): one Typer app, its commands grouped by
what they act on, one module each.

==================  ===================================================================
module              commands
==================  ===================================================================
``runs``            ``start``, ``status``, ``history``, ``list``, ``cancel``
``review_group``    ``review show``, ``review ID approve|reedit|reject|correct``
``reviews``         ``review-all``, ``reviews export``
``dlq``             ``dlq list``, ``dlq redrive``
``ops``             ``stats``, ``stuck``, ``codec-server``
``keys``            ``keys payload``, ``keys reviewer NAME``, ``keys revoke KEY_ID``
``inbox``           ``inbox serve``, ``inbox new-key``, ``inbox new-token NAME``
``budgets``         ``spend``, ``budget``
``contract``        ``graph``, ``schema``
``pipelines``       ``pipeline check``, ``pipeline list``, ``pipeline show``, ``pipeline graph``
``ledger``          ``ledger sync``, ``ledger follow``, ``ledger sql``, ``ledger report``
``lab``             ``lab run``
``experiments``     ``experiments status|halt|promote|resume|watch``
==================  ===================================================================

A command line names one command, so `build_app` loads only that command's module: ``keys
payload`` or ``graph`` start without Temporal's client, boto3 or aiohttp. Help, and a name that
is no command, get every module. Every failure a user can cause or meet ends in one clear line
on stderr, starting ``error: ``, and an exit status that says what kind it was
(`aiorch.cli.output`), never a traceback.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType

import typer

from aiorch.cli.output import cli_app

# Each command (or command group) and the module under aiorch.cli that registers it.
COMMANDS: Mapping[str, str] = MappingProxyType(
    {
        "start": "runs",
        "status": "runs",
        "history": "runs",
        "list": "runs",
        "cancel": "runs",
        "result": "runs",
        "review": "review_group",
        "review-all": "reviews",
        "reviews": "reviews",
        "dlq": "dlq",
        "stats": "ops",
        "stuck": "ops",
        "codec-server": "ops",
        "keys": "keys",
        "inbox": "inbox",
        "spend": "budgets",
        "budget": "budgets",
        "graph": "contract",
        "schema": "contract",
        "pipeline": "pipelines",
        "ledger": "ledger",
        "lab": "lab",
        "experiments": "experiments",
    }
)


def build_app(command: str | None = None) -> typer.Typer:
    """The Typer app with ``command``'s module registered, or every module's (None, or a name
    that is no command)."""
    app = cli_app("ai-orchestrator: start, review and inspect durable LLM pipeline runs.")

    module = COMMANDS.get(command) if command is not None else None
    chosen = [module] if module is not None else list(dict.fromkeys(COMMANDS.values()))
    for name in chosen:
        importlib.import_module(f"aiorch.cli.{name}").register(app)
    return app
