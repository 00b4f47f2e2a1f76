"""Reviewer authentication is on unless an operator turns it off (``REVIEW_AUTH``): a worker
without reviewer keys refuses to start, a keys file without a key is refused rather than read as
"no keys", and ``REVIEW_AUTH=off`` is warned about at every start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiorch.devstack.docs import ROOT
from aiorch.devstack.processes import free_port
from aiorch.ops.signing import SigningKey
from aiorch.worker.options import review_auth_warning
from aiorch_runtime.config import ConfigError, Settings

ENTRY = SigningKey.generate("alice").public_entry()


def test_required_is_the_default_and_needs_a_key() -> None:
    """With nothing set, authentication is required and a worker cannot start: the one line
    names what to set, and how to turn it off on purpose."""
    settings = Settings(review_public_keys=None, review_public_keys_file=None)
    assert settings.review_auth == "required"
    with pytest.raises(ConfigError) as info:
        review_auth_warning(settings)
    message = str(info.value)
    assert "REVIEW_PUBLIC_KEYS" in message and "REVIEW_AUTH=off" in message
    assert "\n" not in message
    assert review_auth_warning(Settings(review_public_keys=ENTRY)) is None


@pytest.mark.parametrize("content", ["", "\n\n", "# keys revoked pending rotation\n", "  # a\n#b"])
def test_a_keys_file_without_a_key_is_refused(tmp_path: Path, content: str) -> None:
    """A keys file that is empty or holds only comments (say, "# keys revoked pending
    rotation") stops every process at load with one line naming the file's variable, instead of
    turning authentication off."""
    path = tmp_path / "keys"
    path.write_text(content)
    with pytest.raises(ConfigError, match=r"^REVIEW_PUBLIC_KEYS_FILE holds no key"):
        Settings(review_public_keys_file=path)


def test_a_keys_variable_of_only_comments_is_refused_and_an_empty_one_is_unset() -> None:
    """REVIEW_PUBLIC_KEYS holding only a comment is refused the same way; an empty variable
    means unset, as for every other variable."""
    with pytest.raises(ConfigError, match=r"^REVIEW_PUBLIC_KEYS holds no key"):
        Settings(review_public_keys="# none for now")
    assert Settings(review_public_keys="").review_keys() == []


def test_off_is_a_warning_and_off_with_keys_is_a_contradiction() -> None:
    """REVIEW_AUTH=off without keys starts with a warning that says what it allows;
    REVIEW_AUTH=off with keys is refused, since either could have been meant."""
    warning = review_auth_warning(Settings(review_auth="off", review_public_keys=None))
    assert warning is not None and warning.startswith("REVIEW_AUTH=off: reviews are not")
    with pytest.raises(ConfigError, match="REVIEW_AUTH=off and REVIEW_PUBLIC_KEYS are both set"):
        review_auth_warning(Settings(review_auth="off", review_public_keys=ENTRY))


def test_the_worker_refuses_to_start_before_connecting() -> None:
    """`python worker.py` with no reviewer key exits 1 with that one line on stderr before it
    tries Temporal (nothing listens at its address)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REVIEW_", "OTEL_EXPORTER"))}
    env |= {"TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}", "HEALTH_PORT": "0"}
    done = subprocess.run(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("worker: reviewer authentication is required")
    assert len(done.stderr.strip().splitlines()) == 1
    assert "cannot connect" not in done.stderr
