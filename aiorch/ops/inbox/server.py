"""Running the review inbox (``aiorch inbox serve``; ``aiorch inbox new-key`` and ``aiorch inbox
new-token NAME`` make its key and its reviewers' tokens, see ``aiorch.cli.inbox``).

The inbox checks its own configuration first (`credentials`: ``INBOX_SIGNING_KEY`` or ``_FILE``,
and ``INBOX_TOKENS_FILE`` and/or ``INBOX_USER_HEADER``), then takes a client connected with the
deployment's data converter (so encrypted payloads decode with ``PAYLOAD_KEYS``) and serves on
``INBOX_HOST:INBOX_PORT`` (127.0.0.1:8703) until SIGTERM or SIGINT, printing ``review inbox
listening on URL`` once listening.
"""

from __future__ import annotations

import logging
import socket
from datetime import timedelta
from functools import partial
from typing import Final

import uvicorn
from starlette.applications import Starlette
from temporalio.client import Client

from aiorch.ops.inbox import auth
from aiorch.ops.inbox.app import Inbox, InboxOptions, create_app
from aiorch.ops.inbox.runs import RunReader
from aiorch.ops.inbox.sessions import Sessions
from aiorch.ops.reviews import ReviewOutcome, ReviewTarget, Signer, submit_review
from aiorch.ops.signing import SigningKey
from aiorch_runtime.config import ConfigError, Settings
from aiorch_runtime.links import web_ui_run_url
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
            "`aiorch inbox new-key` makes one"
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
    sessions = Sessions(timedelta(seconds=settings.inbox_session_ttl_s))
    return auth.Authenticator(tokens, settings.inbox_user_header, sessions)


def credentials(
    settings: Settings, host: str | None = None
) -> tuple[SigningKey, auth.Authenticator]:
    """The inbox's signing key and how it knows its reviewers, checked before it connects,
    for an inbox listening on ``host`` (default ``INBOX_HOST``).

    Raises:
        ConfigError: the inbox is not configured well enough to run (also: it would listen
            beyond loopback without ``INBOX_URL``).
    """
    auth.check_inbox_url(host or settings.inbox_host, settings.inbox_url)
    return signing_key(settings), authenticator(settings)


def build_app(
    settings: Settings, client: Client, key: SigningKey, authn: auth.Authenticator
) -> Starlette:
    """The inbox app for this deployment, on ``client`` (see `credentials`)."""
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
    client: Client, signer: Signer, decision: ReviewDecision, target: ReviewTarget
) -> ReviewOutcome:
    return await submit_review(client, target.workflow_id, decision, signer=signer, target=target)


async def serve(
    app: Starlette, settings: Settings, host: str | None = None, port: int | None = None
) -> None:
    """Serve ``app`` until SIGTERM or SIGINT (uvicorn's own handlers), printing the ready line
    once listening.

    Raises:
        OSError: the address cannot be bound.
    """
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
