"""``inbox``: serve the review inbox, and make its signing key and its reviewers' tokens."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Annotated

import typer

from aiorch.cli.output import CliError, command_group, one_line_errors
from aiorch.cli.session import connected
from aiorch.ops.inbox import auth, server
from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import Settings, load_settings

inbox_app = command_group(
    "The review inbox: serve it, make its signing key, make a reviewer's login token."
)


@inbox_app.command("serve")
@one_line_errors
def serve(
    host: Annotated[str | None, typer.Option(help="default: INBOX_HOST")] = None,
    port: Annotated[int | None, typer.Option(help="default: INBOX_PORT; 0 picks a free one")] = (
        None
    ),
) -> None:
    """Serve the review inbox until SIGTERM or Ctrl-C (needs INBOX_SIGNING_KEY, and
    INBOX_TOKENS_FILE and/or INBOX_USER_HEADER); payloads decode with PAYLOAD_KEYS."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = load_settings()
    key, authn = server.credentials(settings, host)

    async def connect_and_serve(settings: Settings) -> None:
        app = server.build_app(settings, await connected(settings), key, authn)
        await server.serve(app, settings, host, port)

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(connect_and_serve(settings))
    except OSError as error:
        raise CliError(f"the inbox cannot listen: {error.strerror or error}") from None


@inbox_app.command("new-key")
def new_key() -> None:
    """Print a fresh signing key for the inbox (the INBOX_SIGNING_KEY line, a secret) and the
    entry that lets the workers trust it (add it to REVIEW_PUBLIC_KEYS)."""
    key = SigningKey.generate(server.KEY_ID)
    typer.echo(f"INBOX_SIGNING_KEY={key.private_entry()}")
    typer.echo(f"REVIEW_PUBLIC_KEYS entry (workers): {key.public_entry(None)}")


@inbox_app.command("new-token")
def new_token(
    reviewer: Annotated[str, typer.Argument(help="the reviewer's name, as reviews will show it")],
) -> None:
    """Print a fresh login token for REVIEWER (shown once: give it to them) and the line for
    INBOX_TOKENS_FILE, which keeps only its hash."""
    token, line = auth.new_token(reviewer)
    typer.echo(f"token for {reviewer} (give it to them; it is not stored): {token}")
    typer.echo(f"line for INBOX_TOKENS_FILE: {line}")


def register(app: typer.Typer) -> None:
    """Add the ``inbox`` group to ``app``."""
    app.add_typer(inbox_app, name="inbox")
