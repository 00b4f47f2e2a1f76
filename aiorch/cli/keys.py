"""``keys``: make the keys a deployment configures (payload encryption, reviewer and requester
signing), and revoke reviewer keys.

Each key maker prints whole configuration lines (``NAME=value``, as the workers read them) on
stdout and nothing else, so they can be captured into a secret store; none writes a file.
"""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import ValidationError

from aiorch.cli.output import CliError, command_group, one_line_errors, out, plain
from aiorch.cli.session import run_async
from aiorch.ops.revocation import revoke_in_open_runs
from aiorch.ops.signing import SigningKey
from aiorch_runtime.codec import KeyRing, new_key
from aiorch_runtime.errors import ConfigError
from workflows.engine.identity import KeySpecError, parse_requester_keys, parse_review_keys
from workflows.payloads import Revocation, describe_validation_error

keys_app = command_group("Make keys: a payload encryption key, or a reviewer's signing key pair.")


@keys_app.command("payload")
@one_line_errors
def payload_key(
    key_id: Annotated[
        str, typer.Option("--id", help="the key's id in the key ring (rotating: the next one)")
    ] = "k1",
) -> None:
    """Print a fresh random AES-256 key as a configuration line: PAYLOAD_KEYS=KEY_ID:KEY.

    To rotate, make one with the next id (--id k2), add its KEY_ID:KEY entry to the existing
    PAYLOAD_KEYS (comma-separated) and set PAYLOAD_KEY_ID to the new id.
    """
    entry = f"{key_id}:{new_key()}"
    try:
        KeyRing.parse(entry)  # the workers' own reading of the entry
    except ConfigError as error:
        raise CliError(f"cannot make this key: {error}") from None
    typer.echo(f"PAYLOAD_KEYS={entry}")


@keys_app.command("reviewer")
@one_line_errors
def reviewer_key(
    name: Annotated[str, typer.Argument(help="the key id: the reviewer, or the inbox that signs")],
    signs_for: Annotated[
        list[str] | None,
        typer.Option(
            "--signs-for",
            help="a reviewer this key may sign for (repeat it); default: only NAME",
        ),
    ] = None,
    anyone: Annotated[
        bool, typer.Option("--any", help="may sign for any reviewer (an identity provider)")
    ] = False,
) -> None:
    """Print a fresh Ed25519 key pair for signed reviews, as two configuration lines.

    REVIEWER_KEY (the secret half) goes to the one who signs (the CLI, the review inbox);
    the REVIEW_PUBLIC_KEYS entry goes to every worker.
    """
    key = SigningKey.generate(name)
    public = key.public_entry(None if anyone else (signs_for or [name]))
    try:
        parse_review_keys(public)  # the workers' own reading of the entry
    except KeySpecError as error:
        raise CliError(f"cannot make this key: {error}") from None
    typer.echo(f"REVIEWER_KEY={key.private_entry()}")
    typer.echo(f"REVIEW_PUBLIC_KEYS={public}")


@keys_app.command("requester")
@one_line_errors
def requester_key(
    name: Annotated[str, typer.Argument(help="the requester (the key id)")],
    tenant: Annotated[str, typer.Option(help="whose budget this requester's runs spend")],
) -> None:
    """Print a fresh Ed25519 key pair for signed starts, as two configuration lines.

    REQUESTER_KEY (the secret half) goes to the requester's CLI or gateway; the
    REQUESTER_PUBLIC_KEYS entry goes to every worker.
    """
    key = SigningKey.generate(name)
    public = key.requester_entry(tenant)
    try:
        parse_requester_keys(public)  # the workers' own reading of the entry
    except KeySpecError as error:
        raise CliError(f"cannot make this key: {error}") from None
    typer.echo(f"REQUESTER_KEY={key.private_entry()}")
    typer.echo(f"REQUESTER_PUBLIC_KEYS={public}")


@keys_app.command("revoke")
@one_line_errors
def revoke(
    key_ids: Annotated[
        list[str] | None, typer.Argument(help="reviewer key ids to stop accepting")
    ] = None,
    reviewer: Annotated[
        list[str] | None,
        typer.Option("--reviewer", help="a reviewer to stop accepting (repeat it)"),
    ] = None,
    operator: Annotated[str, typer.Option(help="who revokes (recorded)")] = "operator",
    reason: Annotated[str | None, typer.Option(help="why")] = None,
) -> None:
    """Make every open run refuse reviews signed with KEY_IDS, or by the --reviewer names.

    Remove them from REVIEW_PUBLIC_KEYS and ALLOWED_REVIEWERS too: that changes new runs;
    this reaches the runs already open (one signal each).
    """
    try:
        revocation = Revocation(
            operator=operator, key_ids=key_ids or [], reviewers=reviewer or [], reason=reason
        )
    except ValidationError as error:
        raise CliError(f"invalid revocation: {describe_validation_error(error)}") from None
    if not revocation.key_ids and not revocation.reviewers:
        raise CliError("name a key id to revoke, or --reviewer NAME")
    done = run_async(lambda client, _: revoke_in_open_runs(client, revocation))
    out.print(plain(f"revoked in {done.told} open run(s); {done.closed} closed meanwhile"))


def register(app: typer.Typer) -> None:
    """Add the ``keys`` group to ``app``."""
    app.add_typer(keys_app, name="keys")
