"""``aiorch inbox``: its key and token commands, and one line for each way the inbox can fail
to start."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from aiorch.cli import build_app
from aiorch.ops.inbox import auth
from aiorch.ops.signing import SigningKey
from workflows.engine.identity import parse_review_keys


def inbox(*args: str) -> tuple[int, str]:
    """``aiorch inbox ARGS`` in this process: exit status and output (stdout and stderr)."""
    done = CliRunner().invoke(build_app("inbox"), ["inbox", *args])
    return done.exit_code, done.output


def test_new_key_prints_the_secret_line_and_the_entry_that_trusts_it() -> None:
    """new-key prints INBOX_SIGNING_KEY=... and its public REVIEW_PUBLIC_KEYS entry, which lets
    the key sign for any reviewer (the inbox authenticates them itself)."""
    code, output = inbox("new-key")
    assert code == 0
    secret_line, public_line = output.splitlines()
    key = SigningKey.parse(secret_line.removeprefix("INBOX_SIGNING_KEY="))
    [entry] = parse_review_keys(public_line.rsplit(" ", 1)[1])
    assert (key.key_id, entry.key_id, entry.reviewers) == ("inbox", "inbox", None)
    assert public_line.endswith(key.public_entry(None))


def test_new_token_prints_the_token_once_and_the_hashed_line(tmp_path: Path) -> None:
    """new-token prints a token and the tokens-file line that logs exactly it in."""
    code, output = inbox("new-token", "alice")
    assert code == 0
    token_line, file_line = output.splitlines()
    token = token_line.rsplit(" ", 1)[1]
    (tmp_path / "tokens").write_text(file_line.rsplit(" ", 1)[1] + "\n")
    assert auth.TokenBook(tmp_path / "tokens").login(token) is not None
    assert token not in file_line


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "the review inbox signs every review: set INBOX_SIGNING_KEY"),
        ({"INBOX_SIGNING_KEY": "inbox:notbase64!"}, "INBOX_SIGNING_KEY: the key is not valid"),
        ({"INBOX_SIGNING_KEY": "KEY"}, "needs a way to know its reviewers"),
        ({"INBOX_SIGNING_KEY": "KEY", "INBOX_TOKENS_FILE": "/nonexistent"}, "cannot read it"),
        (
            {
                "INBOX_SIGNING_KEY": "KEY",
                "INBOX_USER_HEADER": "X-User",
                "TEMPORAL_ADDRESS": "127.0.0.1:1",
            },
            "cannot connect to Temporal at 127.0.0.1:1",
        ),
        ({"INBOX_URL": "inbox.example.com"}, "INBOX_URL="),
        (
            {"INBOX_SIGNING_KEY": "KEY", "INBOX_USER_HEADER": "X-User", "INBOX_HOST": "0.0.0.0"},
            "the review inbox listens on 0.0.0.0, not on loopback: set INBOX_URL",
        ),
    ],
)
def test_every_failure_to_start_is_one_line(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    """Missing or bad key, no way to authenticate, an unreadable tokens file, Temporal down,
    a bad setting, listening beyond loopback without INBOX_URL: exit status 1 and one line
    naming the problem, no traceback."""
    key = SigningKey.generate("inbox").private_entry()
    for name in (
        "INBOX_SIGNING_KEY",
        "INBOX_SIGNING_KEY_FILE",
        "INBOX_TOKENS_FILE",
        "INBOX_USER_HEADER",
        "INBOX_HOST",
        "INBOX_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, key if value == "KEY" else value)
    code, err = inbox("serve")
    assert code == 1
    assert err.startswith("error: ")
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert key.split(":")[1] not in err
