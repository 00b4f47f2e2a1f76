"""``python -m aiorch.ops.inbox``: its key and token commands, and one line for each way it can
fail to start."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiorch.ops.inbox import auth, server
from aiorch.ops.signing import SigningKey
from workflows.identity import parse_review_keys


def test_new_key_prints_the_secret_line_and_the_entry_that_trusts_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """new-key prints INBOX_SIGNING_KEY=... and its public REVIEW_PUBLIC_KEYS entry, which lets
    the key sign for any reviewer (the inbox authenticates them itself)."""
    assert server.main(["new-key"]) == 0
    secret_line, public_line = capsys.readouterr().out.splitlines()
    key = SigningKey.parse(secret_line.removeprefix("INBOX_SIGNING_KEY="))
    [entry] = parse_review_keys(public_line.rsplit(" ", 1)[1])
    assert (key.key_id, entry.key_id, entry.reviewers) == ("inbox", "inbox", None)
    assert public_line.endswith(key.public_entry(None))


def test_new_token_prints_the_token_once_and_the_hashed_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """new-token prints a token and the tokens-file line that logs exactly it in."""
    assert server.main(["new-token", "alice"]) == 0
    token_line, file_line = capsys.readouterr().out.splitlines()
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
    ],
)
def test_every_failure_to_start_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    message: str,
) -> None:
    """Missing or bad key, no way to authenticate, an unreadable tokens file, Temporal down,
    a bad setting: exit status 1 and one line naming the problem, no traceback."""
    key = SigningKey.generate("inbox").private_entry()
    for name in (
        "INBOX_SIGNING_KEY",
        "INBOX_SIGNING_KEY_FILE",
        "INBOX_TOKENS_FILE",
        "INBOX_USER_HEADER",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, key if value == "KEY" else value)
    assert server.run() == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert key.split(":")[1] not in err
