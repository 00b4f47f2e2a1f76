"""The two shell scripts that handle the stack's secrets, run with `sh` on temporary
directories standing in for the volumes, every file owned by this user instead of the images'
uids."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from aiorch.ops.inbox.auth import TokenBook
from aiorch.ops.signing import SigningKey
from aiorch.runtime.codec import KeyRing
from tests.static.compose import (
    SECRETS_SCRIPT,
    WRAPPER_SCRIPT,
)
from workflows.identity import parse_review_keys

SECRET_FILES = {
    "payload-keys": ("keys", 0o400),
    "codec-token": ("token", 0o440),
    "postgres-password": ("password", 0o400),
    "grafana-admin-password": ("password", 0o400),
    "inbox-key": ("key", 0o400),
    "review-public-keys": ("keys", 0o400),
    "inbox-tokens": ("tokens", 0o400),
}


def _volumes(tmp_path: Path) -> Path:
    root = tmp_path / "secrets"
    for directory in SECRET_FILES:
        (root / directory).mkdir(parents=True)
    return root


def _secrets_sh(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    owner = f"{os.getuid()}:{os.getgid()}"
    owners = {
        f"{name}_OWNER": owner
        for name in ("PAYLOAD_KEYS", "CODEC_TOKEN", "POSTGRES", "GRAFANA", "INBOX")
    }
    return subprocess.run(
        ["sh", str(SECRETS_SCRIPT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=root.parent,
        env={**os.environ, **owners, "SECRETS_ROOT": str(root), "PYTHON": sys.executable},
        timeout=60,
        check=False,
    )


def _secret_values(root: Path) -> dict[str, str]:
    """Each volume's one file (no temporary file left beside it), by directory."""
    values = {}
    for directory, (name, _mode) in SECRET_FILES.items():
        assert [path.name for path in (root / directory).iterdir()] == [name], directory
        values[directory] = (root / directory / name).read_text(encoding="utf-8")
    return values


def _key_material(ring: str) -> list[str]:
    return [entry.split(":", 1)[1].strip() for entry in ring.split() if ":" in entry]


def test_secrets_script_creates_each_secret_once_and_prints_none(tmp_path: Path) -> None:
    """`secrets.sh init` makes a key ring with one AES-256 key (k1), a token and two passwords,
    each readable by its owner only (the token by its group too); a second run changes nothing;
    neither run prints a value."""
    root = _volumes(tmp_path)
    first = _secrets_sh(root, "init")
    assert first.returncode == 0, first.stderr
    values = _secret_values(root)
    assert KeyRing.parse(values["payload-keys"]).current_id == "k1"
    for directory in ("codec-token", "postgres-password", "grafana-admin-password"):
        assert re.fullmatch(r"[\w-]{43}\n", values[directory]), directory
    for directory, (name, mode) in SECRET_FILES.items():
        assert (root / directory / name).stat().st_mode & 0o777 == mode, directory

    second = _secrets_sh(root, "init")
    assert second.returncode == 0, second.stderr
    assert _secret_values(root) == values
    printed = first.stdout + first.stderr + second.stdout + second.stderr
    for secret in [*_key_material(values["payload-keys"]), *values.values()]:
        assert secret.strip() not in printed


def test_secrets_script_makes_the_inbox_key_and_the_entry_that_trusts_it(tmp_path: Path) -> None:
    """`init` makes the inbox's signing key and, from it, the workers' REVIEW_PUBLIC_KEYS entry
    (key id inbox, signs for any reviewer), and a tokens file with no token yet."""
    root = _volumes(tmp_path)
    assert _secrets_sh(root, "init").returncode == 0
    values = _secret_values(root)
    key = SigningKey.parse(values["inbox-key"])
    assert key.key_id == "inbox"
    [entry] = parse_review_keys(values["review-public-keys"])
    assert (entry.key_id, entry.reviewers) == ("inbox", None)
    assert values["review-public-keys"].strip() == key.public_entry(None)
    assert len(TokenBook(root / "inbox-tokens" / "tokens")) == 0


def test_secrets_script_adds_and_removes_inbox_reviewers(tmp_path: Path) -> None:
    """`add-inbox-reviewer NAME` keeps only the token's hash and prints the token once (it logs
    NAME in); `remove-inbox-reviewer NAME` drops NAME's tokens and nobody else's."""
    root = _volumes(tmp_path)
    assert _secrets_sh(root, "add-inbox-reviewer", "alice").returncode == 1  # no stack yet
    assert _secrets_sh(root, "init").returncode == 0
    made = {}
    for name in ("alice", "alice-2", "bob"):
        added = _secrets_sh(root, "add-inbox-reviewer", name)
        assert added.returncode == 0, added.stderr
        made[name] = added.stdout.strip()
        assert re.fullmatch(r"[\w-]{43}", made[name]) and made[name] not in added.stderr
    tokens_file = root / "inbox-tokens" / "tokens"
    assert not any(token in tokens_file.read_text() for token in made.values())
    book = TokenBook(tokens_file)
    assert {name: (book.login(token) or ("",))[0] for name, token in made.items()} == {
        "alice": "alice",
        "alice-2": "alice-2",
        "bob": "bob",
    }
    removed = _secrets_sh(root, "remove-inbox-reviewer", "alice")
    assert removed.returncode == 0 and "removed 1 " in removed.stderr
    book = TokenBook(tokens_file)
    assert book.login(made["alice"]) is None
    assert book.login(made["alice-2"]) is not None and book.login(made["bob"]) is not None
    assert _secrets_sh(root, "add-inbox-reviewer").returncode == 1


def test_secrets_script_rotation_adds_a_key_and_keeps_the_old_ones(tmp_path: Path) -> None:
    """`rotate-payload-key` appends k2, printing only its id, keeps k1 as it was, and the ring
    parses with PAYLOAD_KEY_ID=k2; the next rotation adds k3. Without a ring it refuses."""
    root = _volumes(tmp_path)
    refused = _secrets_sh(root, "rotate-payload-key")
    assert refused.returncode == 1 and "no key ring yet" in refused.stderr
    assert _secrets_sh(root, "init").returncode == 0
    before = (root / "payload-keys" / "keys").read_text(encoding="utf-8")

    rotated = _secrets_sh(root, "rotate-payload-key")
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout == "k2\n"
    ring = (root / "payload-keys" / "keys").read_text(encoding="utf-8")
    assert ring.startswith(before)
    parsed = KeyRing.parse(ring, "k2")
    assert sorted(parsed.keys) == ["k1", "k2"] and parsed.keys["k1"] != parsed.keys["k2"]
    assert not any(key in rotated.stdout + rotated.stderr for key in _key_material(ring))
    assert (root / "payload-keys" / "keys").stat().st_mode & 0o777 == 0o400
    assert _secrets_sh(root, "rotate-payload-key").stdout == "k3\n"


def test_secrets_script_imports_a_ring_only_into_an_empty_volume(tmp_path: Path) -> None:
    """`import-payload-keys` restores a valid ring from standard input into an empty volume; it
    refuses a ring that does not parse (naming the problem, never the key) and refuses to
    replace an existing ring."""
    source = _volumes(tmp_path / "old")
    assert _secrets_sh(source, "init").returncode == 0
    assert _secrets_sh(source, "rotate-payload-key").returncode == 0
    backup = (source / "payload-keys" / "keys").read_text(encoding="utf-8")

    root = _volumes(tmp_path / "new")
    bad = _secrets_sh(root, "import-payload-keys", stdin="k1:c2hvcnQ=\n")
    assert bad.returncode == 1 and "AES-256 needs 32" in bad.stderr
    assert "c2hvcnQ" not in bad.stderr and not any((root / "payload-keys").iterdir())

    restored = _secrets_sh(root, "import-payload-keys", stdin=backup)
    assert restored.returncode == 0, restored.stderr
    assert (root / "payload-keys" / "keys").read_text(encoding="utf-8") == backup
    assert "k1 k2" in restored.stderr
    again = _secrets_sh(root, "import-payload-keys", stdin=backup)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_secrets_script_replaces_the_codec_token_on_request(tmp_path: Path) -> None:
    """`new-codec-token` replaces the token with a fresh one of the same shape and mode, and
    leaves every other secret alone."""
    root = _volumes(tmp_path)
    assert _secrets_sh(root, "init").returncode == 0
    before = _secret_values(root)
    renewed = _secrets_sh(root, "new-codec-token")
    assert renewed.returncode == 0, renewed.stderr
    after = _secret_values(root)
    assert after["codec-token"] != before["codec-token"]
    assert re.fullmatch(r"[\w-]{43}\n", after["codec-token"])
    assert {k: v for k, v in after.items() if k != "codec-token"} == {
        k: v for k, v in before.items() if k != "codec-token"
    }
    assert (root / "codec-token" / "token").stat().st_mode & 0o777 == 0o440


def test_with_secrets_sets_and_appends_variables_from_files(tmp_path: Path) -> None:
    """with-secrets.sh sets NAME=FILE to the file's content and appends NAME+=FILE to NAME's
    value before running the command; a missing file stops it, with one line naming the file,
    before the command runs."""
    token = tmp_path / "token"
    token.write_text("s3cr3t\n", encoding="utf-8")
    show = ["--", "sh", "-c", 'printf "%s|%s" "$ENDPOINT" "$PASSWORD"']

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "ENDPOINT": "http://localhost:8702/"}
        return subprocess.run(
            ["sh", str(WRAPPER_SCRIPT), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=False,
        )

    done = run(f"ENDPOINT+={token}", f"PASSWORD={token}", *show)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "http://localhost:8702/s3cr3t|s3cr3t"

    missing = run(f"PASSWORD={tmp_path / 'absent'}", *show)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "absent" in missing.stderr
