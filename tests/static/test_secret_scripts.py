"""The two shell scripts that handle the stack's secrets, run with `sh` on temporary
directories standing in for the volumes, every file owned by this user instead of the images'
uids."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from aiorch.ops.inbox.auth import TokenBook
from aiorch.ops.signing import SigningKey
from aiorch_runtime.codec import KeyRing
from aiorch_runtime.config import load_settings
from tests.static.compose import WRAPPER_SCRIPT
from tests.static.secret_volumes import SECRET_FILES, run_secrets_sh, secret_volumes
from workflows.engine.identity import parse_review_keys

# Each script run starts the CLI in processes of its own (`python -m aiorch keys ...`): the
# end-to-end tier, as the README's test tiers put it, not the inner loop.
pytestmark = pytest.mark.e2e


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
    root = secret_volumes(tmp_path)
    first = run_secrets_sh(root, "init")
    assert first.returncode == 0, first.stderr
    values = _secret_values(root)
    assert KeyRing.parse(values["payload-keys"]).current_id == "k1"
    for directory in ("codec-token", "postgres-password", "grafana-admin-password"):
        assert re.fullmatch(r"[\w-]{43}\n", values[directory]), directory
    for directory, (name, mode) in SECRET_FILES.items():
        assert (root / directory / name).stat().st_mode & 0o777 == mode, directory

    second = run_secrets_sh(root, "init")
    assert second.returncode == 0, second.stderr
    assert _secret_values(root) == values
    printed = first.stdout + first.stderr + second.stdout + second.stderr
    for secret in [*_key_material(values["payload-keys"]), *values.values()]:
        assert secret.strip() not in printed


def test_secrets_script_makes_the_inbox_key_and_the_entry_that_trusts_it(tmp_path: Path) -> None:
    """`init` makes the inbox's signing key and, from it, the workers' REVIEW_PUBLIC_KEYS entry
    (key id inbox, signs for any reviewer), and a tokens file with no token yet."""
    root = secret_volumes(tmp_path)
    assert run_secrets_sh(root, "init").returncode == 0
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
    root = secret_volumes(tmp_path)
    assert run_secrets_sh(root, "add-inbox-reviewer", "alice").returncode == 1  # no stack yet
    assert run_secrets_sh(root, "init").returncode == 0
    made = {}
    for name in ("alice", "alice-2", "bob"):
        added = run_secrets_sh(root, "add-inbox-reviewer", name)
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
    removed = run_secrets_sh(root, "remove-inbox-reviewer", "alice")
    assert removed.returncode == 0 and "removed 1 " in removed.stderr
    book = TokenBook(tokens_file)
    assert book.login(made["alice"]) is None
    assert book.login(made["alice-2"]) is not None and book.login(made["bob"]) is not None
    assert run_secrets_sh(root, "add-inbox-reviewer").returncode == 1


def test_secrets_script_rotation_adds_a_key_and_keeps_the_old_ones(tmp_path: Path) -> None:
    """`rotate-payload-key` appends k2, printing only its id, keeps k1 as it was, and the ring
    parses with PAYLOAD_KEY_ID=k2; the next rotation adds k3. Without a ring it refuses."""
    root = secret_volumes(tmp_path)
    refused = run_secrets_sh(root, "rotate-payload-key")
    assert refused.returncode == 1 and "no key ring yet" in refused.stderr
    assert run_secrets_sh(root, "init").returncode == 0
    before = (root / "payload-keys" / "keys").read_text(encoding="utf-8")

    rotated = run_secrets_sh(root, "rotate-payload-key")
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout == "k2\n"
    ring = (root / "payload-keys" / "keys").read_text(encoding="utf-8")
    assert ring.startswith(before)
    parsed = KeyRing.parse(ring, "k2")
    assert sorted(parsed.keys) == ["k1", "k2"] and parsed.keys["k1"] != parsed.keys["k2"]
    assert not any(key in rotated.stdout + rotated.stderr for key in _key_material(ring))
    assert (root / "payload-keys" / "keys").stat().st_mode & 0o777 == 0o400
    assert run_secrets_sh(root, "rotate-payload-key").stdout == "k3\n"


def test_secrets_script_imports_a_ring_only_into_an_empty_volume(tmp_path: Path) -> None:
    """`import-payload-keys` restores a valid ring from standard input into an empty volume; it
    refuses a ring that does not parse (naming the problem, never the key) and refuses to
    replace an existing ring."""
    source = secret_volumes(tmp_path / "old")
    assert run_secrets_sh(source, "init").returncode == 0
    assert run_secrets_sh(source, "rotate-payload-key").returncode == 0
    backup = (source / "payload-keys" / "keys").read_text(encoding="utf-8")

    root = secret_volumes(tmp_path / "new")
    bad = run_secrets_sh(root, "import-payload-keys", stdin="k1:c2hvcnQ=\n")
    assert bad.returncode == 1 and "AES-256 needs 32" in bad.stderr
    assert "c2hvcnQ" not in bad.stderr and not any((root / "payload-keys").iterdir())

    restored = run_secrets_sh(root, "import-payload-keys", stdin=backup)
    assert restored.returncode == 0, restored.stderr
    assert (root / "payload-keys" / "keys").read_text(encoding="utf-8") == backup
    assert "k1 k2" in restored.stderr
    again = run_secrets_sh(root, "import-payload-keys", stdin=backup)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_secrets_script_replaces_the_codec_token_on_request(tmp_path: Path) -> None:
    """`new-codec-token` replaces the token with a fresh one of the same shape and mode, and
    leaves every other secret alone."""
    root = secret_volumes(tmp_path)
    assert run_secrets_sh(root, "init").returncode == 0
    before = _secret_values(root)
    renewed = run_secrets_sh(root, "new-codec-token")
    assert renewed.returncode == 0, renewed.stderr
    after = _secret_values(root)
    assert after["codec-token"] != before["codec-token"]
    assert re.fullmatch(r"[\w-]{43}\n", after["codec-token"])
    assert {k: v for k, v in after.items() if k != "codec-token"} == {
        k: v for k, v in before.items() if k != "codec-token"
    }
    assert (root / "codec-token" / "token").stat().st_mode & 0o777 == 0o440


def _store_password(root: Path) -> str:
    """The password in the worker's capacity store URL (the URL's shape checked on the way)."""
    url = (root / "capacity-store-url" / "url").read_text(encoding="utf-8")
    assert re.fullmatch(r"redis://:[\w-]{43}@redis:6379/0\n", url), "not the store's URL"
    password = urlsplit(url.strip()).password
    assert password is not None
    return password


def _acl_entry(password: str) -> str:
    """The ACL file for ``password``: the store's user, then the healthcheck's."""
    digest = hashlib.sha256(password.encode()).hexdigest()
    return (
        f"user default on #{digest} resetchannels ~aiorch:* +@all -@dangerous\n"
        "user healthcheck on nopass resetchannels -@all +ping\n"
    )


def test_secrets_script_makes_the_store_url_and_the_acl_that_admits_it(tmp_path: Path) -> None:
    """`init` makes the worker's capacity store URL with a random password, and Redis's ACL file
    with only that password's SHA-256 (its user limited to the store's keys, no @dangerous
    command) and a healthcheck user that may only PING; a second run keeps both, and neither
    prints the password or the URL."""
    root = secret_volumes(tmp_path)
    first = run_secrets_sh(root, "init")
    assert first.returncode == 0, first.stderr
    password = _store_password(root)
    acl = (root / "redis-acl" / "users.acl").read_text(encoding="utf-8")
    assert acl == _acl_entry(password) and password not in acl
    second = run_secrets_sh(root, "init")
    assert second.returncode == 0, second.stderr
    assert _store_password(root) == password
    assert "kept capacity-store-url/url" in second.stderr
    assert "kept redis-acl/users.acl" in second.stderr
    for run in (first, second):
        assert password not in run.stdout + run.stderr
        assert "redis://" not in run.stdout + run.stderr


def test_secrets_script_rederives_an_acl_that_does_not_match_the_url(tmp_path: Path) -> None:
    """The URL is the password's one source: `init` rewrites an ACL file that does not match it
    (a volume restored from elsewhere, or the URL's volume recreated) and says to restart Redis,
    and never replaces the URL."""
    root = secret_volumes(tmp_path)
    assert run_secrets_sh(root, "init").returncode == 0
    password = _store_password(root)
    acl = root / "redis-acl" / "users.acl"
    acl.chmod(0o600)
    acl.write_text(_acl_entry("another password"), encoding="utf-8")
    again = run_secrets_sh(root, "init")
    assert again.returncode == 0, again.stderr
    assert "rewrote redis-acl/users.acl" in again.stderr and "restart" in again.stderr
    assert _store_password(root) == password
    assert acl.read_text(encoding="utf-8") == _acl_entry(password)
    assert acl.stat().st_mode & 0o777 == 0o400

    (root / "capacity-store-url" / "url").unlink()
    recreated = run_secrets_sh(root, "init")
    assert recreated.returncode == 0, recreated.stderr
    assert acl.read_text(encoding="utf-8") == _acl_entry(_store_password(root))


def test_secrets_script_makes_the_ledger_passwords_and_the_follower_s_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`init` makes the ledger's writer and reader passwords, two different random tokens, and
    the follower's URL from the writer's, which the ledger settings accept as LEDGER_URL_FILE;
    it prints none of them, and rewrites the URL when the writer's password is replaced."""
    root = secret_volumes(tmp_path)
    first = run_secrets_sh(root, "init")
    assert first.returncode == 0, first.stderr
    values = _secret_values(root)
    writer, reader = values["ledger-writer-password"], values["ledger-reader-password"]
    assert re.fullmatch(r"[\w-]{43}\n", writer) and re.fullmatch(r"[\w-]{43}\n", reader)
    assert writer != reader
    url = f"postgresql://ledger_writer:{writer.strip()}@postgres:5432/ledger"
    assert values["ledger-url"] == url + "\n"
    monkeypatch.delenv("LEDGER_URL", raising=False)
    monkeypatch.setenv("LEDGER_URL_FILE", str(root / "ledger-url" / "url"))
    assert load_settings().ledger_url.get_secret_value() == url
    for secret in (writer, reader):
        assert secret.strip() not in first.stdout + first.stderr

    password = root / "ledger-writer-password" / "password"
    password.chmod(0o600)
    password.write_text("another-password\n", encoding="utf-8")
    again = run_secrets_sh(root, "init")
    assert again.returncode == 0, again.stderr
    assert "rewrote ledger-url/url" in again.stderr
    assert (root / "ledger-url" / "url").read_text(encoding="utf-8") == (
        "postgresql://ledger_writer:another-password@postgres:5432/ledger\n"
    )


def test_secrets_script_replaces_the_redis_password_on_request(tmp_path: Path) -> None:
    """`new-redis-password` writes a new password into the URL and its hash into the ACL file,
    with the same modes, prints neither, says to restart redis and the worker, and leaves every
    other secret alone."""
    root = secret_volumes(tmp_path)
    assert run_secrets_sh(root, "init").returncode == 0
    before, old = _secret_values(root), _store_password(root)
    renewed = run_secrets_sh(root, "new-redis-password")
    assert renewed.returncode == 0, renewed.stderr
    new = _store_password(root)
    assert new != old
    after = _secret_values(root)
    assert after["redis-acl"] == _acl_entry(new)
    changed = {"capacity-store-url", "redis-acl"}
    assert {k: v for k, v in after.items() if k not in changed} == {
        k: v for k, v in before.items() if k not in changed
    }
    for directory in changed:
        name, mode = SECRET_FILES[directory]
        assert (root / directory / name).stat().st_mode & 0o777 == mode
    assert new not in renewed.stdout + renewed.stderr and renewed.stdout == ""
    assert "docker compose restart redis worker" in renewed.stderr


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
