"""``keys``: make the keys a deployment configures (payload encryption, reviewer signing).

Both print configuration lines on stdout and nothing else, so they can be captured into a
secret store; neither writes a file.
"""

from __future__ import annotations

from typing import Annotated

import typer

from aiorch.cli.output import CliError, command_group, one_line_errors
from aiorch.ops.signing import SigningKey
from aiorch.runtime.codec import new_key
from workflows.engine.identity import KeySpecError, parse_review_keys

keys_app = command_group("Make keys: a payload encryption key, or a reviewer's signing key pair.")


@keys_app.command("payload")
def payload_key() -> None:
    """Print a fresh random AES-256 key, base64, for a PAYLOAD_KEYS entry (KEY_ID:KEY)."""
    typer.echo(new_key())


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


def register(app: typer.Typer) -> None:
    """Add the ``keys`` group to ``app``."""
    app.add_typer(keys_app, name="keys")
