"""Running the review inbox: ``python -m aiorch.ops.inbox`` (and, later, ``aiorch inbox``).

Commands:

- ``serve`` (the default): connect to Temporal with the deployment's data converter (so
  encrypted payloads decode with ``PAYLOAD_KEYS``), then serve on ``INBOX_HOST:INBOX_PORT``
  (127.0.0.1:8703) until SIGTERM or SIGINT, printing ``review inbox listening on URL`` once
  listening. Needs ``INBOX_SIGNING_KEY`` (or ``_FILE``) and ``INBOX_TOKENS_FILE`` and/or
  ``INBOX_USER_HEADER``.
- ``new-key``: a fresh signing key: the ``INBOX_SIGNING_KEY`` line (a secret) and the
  ``inbox:KEY:*`` entry to add to the workers' ``REVIEW_PUBLIC_KEYS``.
- ``new-token NAME``: a fresh reviewer token, printed once, and the line to add to
  ``INBOX_TOKENS_FILE`` (which keeps only its hash).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import sys
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Final

import uvicorn
from starlette.applications import Starlette
from temporalio.client import Client

from aiorch.ops.inbox import auth
from aiorch.ops.inbox.app import Inbox, InboxOptions, create_app
from aiorch.ops.inbox.runs import RunReader
from aiorch.ops.reviews import ReviewOutcome, Signer, submit_review
from aiorch.ops.signing import SigningKey
from aiorch.runtime.config import ConfigError, Settings, load_settings
from aiorch.runtime.links import web_ui_run_url
from aiorch.runtime.temporal import TemporalUnreachable, connect
from workflows.payloads import ReviewDecision

log = logging.getLogger("ai-orchestrator.inbox")

READY_LINE: Final = "review inbox listening on"
KEY_ID: Final = "inbox"


def signing_key(settings: Settings) -> SigningKey:
    """The inbox's own signing key.

    Raises:
        ConfigError: not configured, or unusable (one line, never the key).
    """
    if settings.inbox_signing_key is None:
        raise ConfigError(
            "the review inbox signs every review: set INBOX_SIGNING_KEY (or _FILE); "
            "`python -m aiorch.ops.inbox new-key` makes one"
        )
    return SigningKey.parse(
        settings.inbox_signing_key.get_secret_value(), source="INBOX_SIGNING_KEY"
    )


def authenticator(settings: Settings) -> auth.Authenticator:
    """Tokens and/or the proxy header, as configured.

    Raises:
        ConfigError: neither is configured, or the tokens file is unusable.
    """
    tokens = auth.TokenBook(settings.inbox_tokens_file) if settings.inbox_tokens_file else None
    return auth.Authenticator(tokens, settings.inbox_user_header)


async def build_app(settings: Settings) -> Starlette:
    """The inbox app for this deployment, connected to Temporal.

    Raises:
        ConfigError: the inbox is not configured well enough to run.
        TemporalUnreachable: Temporal cannot be reached.
    """
    key = signing_key(settings)
    authn = authenticator(settings)
    client = await connect(settings)
    signer = key.signer(ttl=timedelta(seconds=settings.review_token_ttl_s))
    inbox = Inbox(
        RunReader(client),
        partial(_submit, client, signer),
        authn,
        InboxOptions(web_ui_url=partial(web_ui_run_url, settings)),
    )
    secure = auth.secure_cookies(settings.inbox_url)
    return create_app(inbox, session_secret=auth.session_secret(key), secure_cookies=secure)


async def _submit(
    client: Client, signer: Signer, workflow_id: str, decision: ReviewDecision
) -> ReviewOutcome:
    return await submit_review(client, workflow_id, decision, signer=signer)


async def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    """Serve until SIGTERM or SIGINT, printing the ready line once listening."""
    app = await build_app(settings)
    bind_host = host or settings.inbox_host
    bind_port = settings.inbox_port if port is None else port
    sock = socket.socket(socket.AF_INET6 if ":" in bind_host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind_host, bind_port))
    except OSError:
        sock.close()
        raise
    actual = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, server_header=False)
    )
    # Listening before uvicorn takes the socket: connections wait in the backlog, so the ready
    # line is true the moment it is printed.
    sock.listen(1024)
    print(f"{READY_LINE} http://{bind_host}:{actual}", flush=True)
    await server.serve(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aiorch.ops.inbox [serve [--host H] [--port P] | new-key | new-token NAME]``."""
    parser = argparse.ArgumentParser(prog="python -m aiorch.ops.inbox", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    commands = parser.add_subparsers(dest="command")
    serve_parser = commands.add_parser("serve", help="serve the inbox (the default)")
    for target in (parser, serve_parser):
        target.add_argument("--host", help="default: INBOX_HOST")
        target.add_argument("--port", type=int, help="default: INBOX_PORT; 0 picks a free one")
    commands.add_parser("new-key", help="print a new signing key and its public entry")
    token_parser = commands.add_parser("new-token", help="print a new reviewer token")
    token_parser.add_argument("reviewer", help="the reviewer's name, as reviews will show it")
    args = parser.parse_args(argv)
    try:
        if args.command == "new-key":
            key = SigningKey.generate(KEY_ID)
            print(f"INBOX_SIGNING_KEY={key.private_entry()}")
            print(f"REVIEW_PUBLIC_KEYS entry (workers): {key.public_entry(None)}")
            return 0
        if args.command == "new-token":
            token, line = auth.new_token(args.reviewer)
            print(f"token for {args.reviewer} (give it to them; it is not stored): {token}")
            print(f"line for INBOX_TOKENS_FILE: {line}")
            return 0
        return run(args.host, args.port)
    except ConfigError as err:
        print(f"inbox: {err}", file=sys.stderr)
        return 1


def run(host: str | None = None, port: int | None = None) -> int:
    """Serve the inbox (what ``aiorch inbox`` runs); the exit status. Every failure to start
    is one line on stderr."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = load_settings()
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(settings, host, port))
    except ConfigError as err:
        print(f"inbox: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"inbox: cannot listen: {err.strerror or err}", file=sys.stderr)
        return 1
    except TemporalUnreachable as err:  # one line: where, how, what to set
        print(f"inbox: {err}", file=sys.stderr)
        return 1
    return 0
