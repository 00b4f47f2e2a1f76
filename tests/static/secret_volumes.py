"""secrets.sh run with `sh` on temporary directories standing in for the stack's secret volumes,
every file owned by this user instead of the images' uids: for the tests of the script itself
and for those that use what it makes (the capacity store's ACL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.static.compose import SECRETS_SCRIPT

# Each volume the script writes: its one file and that file's mode.
SECRET_FILES = {
    "payload-keys": ("keys", 0o400),
    "codec-token": ("token", 0o440),
    "postgres-password": ("password", 0o400),
    "grafana-admin-password": ("password", 0o400),
    "inbox-key": ("key", 0o400),
    "review-public-keys": ("keys", 0o400),
    "inbox-tokens": ("tokens", 0o400),
    "capacity-store-url": ("url", 0o400),
    "redis-acl": ("users.acl", 0o400),
    "ledger-writer-password": ("password", 0o400),
    "ledger-url": ("url", 0o400),
    "ledger-reader-password": ("password", 0o400),
}

# The script's <NAME>_OWNER variables, each a reader's uid:gid in the stack.
OWNERS = (
    "PAYLOAD_KEYS",
    "CODEC_TOKEN",
    "POSTGRES",
    "GRAFANA",
    "INBOX",
    "CAPACITY_STORE",
    "REDIS",
    "LEDGER_DB",
    "LEDGER",
)


def secret_volumes(tmp_path: Path) -> Path:
    """An empty directory per volume, under ``tmp_path/secrets`` (returned)."""
    root = tmp_path / "secrets"
    for directory in SECRET_FILES:
        (root / directory).mkdir(parents=True)
    return root


def run_secrets_sh(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """secrets.sh with ``args`` on the volumes under ``root``, with this interpreter."""
    owner = f"{os.getuid()}:{os.getgid()}"
    owners = {f"{name}_OWNER": owner for name in OWNERS}
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
