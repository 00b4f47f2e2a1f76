"""The contract, printed from code: each pipeline's state graph and the payloads' JSON
schemas."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from aiorch.cli import choices
from aiorch.cli.output import print_error
from aiorch.ops import pipelines
from workflows.contract_payloads import ALL_MODELS


class GraphFormat(StrEnum):
    DOT = "dot"
    MERMAID = "mermaid"


def graph(
    fmt: Annotated[GraphFormat, typer.Option("--format", help="output format")] = GraphFormat.DOT,
    pipeline: Annotated[
        str, typer.Option(help=f"the pipeline ({choices.shown(pipelines.names)})")
    ] = pipelines.DEFAULT_PIPELINE,
) -> None:
    """Print a pipeline's state graph as Graphviz DOT or Mermaid (generated from its code)."""
    try:
        chosen = pipelines.named(pipeline).graph
    except pipelines.UnknownPipeline as err:
        print_error(str(err))
        raise typer.Exit(1) from None
    typer.echo(chosen.to_dot() if fmt is GraphFormat.DOT else chosen.to_mermaid(), nl=False)


def schema(
    name: Annotated[str | None, typer.Argument(help="a payload model; all when omitted")] = None,
) -> None:
    """Print the JSON schema of the contract's payloads."""
    models = {model.__name__: model for model in ALL_MODELS}
    if name is not None and name not in models:
        print_error(f"unknown payload {name!r}; one of {', '.join(models)}")
        raise typer.Exit(1)
    chosen = [models[name]] if name else list(models.values())
    typer.echo(json.dumps({m.__name__: m.model_json_schema() for m in chosen}, indent=2))


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
    app.command()(graph)
    app.command()(schema)
