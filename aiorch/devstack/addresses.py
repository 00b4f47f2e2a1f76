"""Where the local stack listens: the ports its servers take (given, or picked free and
distinct), and the addresses and environment that point the project at them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Self

from aiorch.devstack.processes import HOST, free_port


@dataclass(frozen=True)
class StackAddresses:
    """Where the local stack listens, and the environment that points the project at it."""

    temporal_address: str
    sqs_endpoint_url: str
    openai_base_url: str
    vector_store_path: Path
    # The document pipeline's SQL store: an SQLite file (a worker_env entry may replace it).
    document_store_url: str
    # The worker's only file:// input root (INPUT_FILE_ROOTS): put documents here to use them
    # (the CLI stores them here too when it is claim_check_dir).
    input_dir: Path
    # Reviewer authentication is on: the stack's key signs for any reviewer (an identity
    # provider, as the review inbox is); its private half is in this 0600 file.
    review_public_keys: str
    reviewer_key_file: Path
    # The run ledger (LEDGER_URL): an SQLite file the stack's `ledger follow` keeps filled.
    ledger_url: str
    # The Temporal Web UI; None when the dev server runs headless.
    ui_url: str | None
    # Set only when payload encryption is on; its token is in <data_dir>/codec-token.
    codec_server_url: str | None = None
    # Set only with the review inbox; its login tokens are in <data_dir>/inbox-logins.
    inbox_url: str | None = None
    # Set only with the capacity store (Redis for shared rate limits and tenant budgets).
    capacity_store_url: str | None = None
    # Where the CLI stores documents (CLAIM_CHECK_DIR) when the stack keeps them across
    # restarts; None: in the stack's S3, which moto keeps in memory only.
    claim_check_dir: Path | None = None

    def env(self) -> dict[str, str]:
        """The variables the worker and starter read (see ``aiorch_runtime.config``)."""
        env = {
            "TEMPORAL_ADDRESS": self.temporal_address,
            "SQS_ENDPOINT_URL": self.sqs_endpoint_url,
            "S3_ENDPOINT_URL": self.sqs_endpoint_url,  # moto serves S3 on the same port
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",  # the name plain boto3 reads
            "AWS_ACCESS_KEY_ID": "testing",  # moto accepts any credentials
            "AWS_SECRET_ACCESS_KEY": "testing",
            "OPENAI_BASE_URL": self.openai_base_url,
            "OPENAI_API_KEY": "sim-local-key",
            "VECTOR_STORE_PATH": str(self.vector_store_path),
            "DOCUMENT_STORE_URL": self.document_store_url,
            "LEDGER_URL": self.ledger_url,
            "INPUT_FILE_ROOTS": str(self.input_dir),
            "REVIEW_PUBLIC_KEYS": self.review_public_keys,
            "REVIEWER_KEY_FILE": str(self.reviewer_key_file),
        }
        if self.ui_url is not None:
            env["TEMPORAL_UI_URL"] = self.ui_url
        if self.inbox_url is not None:
            env["INBOX_URL"] = self.inbox_url
        if self.capacity_store_url is not None:
            env["CAPACITY_STORE_URL"] = self.capacity_store_url
        if self.claim_check_dir is not None:
            env["CLAIM_CHECK_DIR"] = str(self.claim_check_dir)
        return env

    @classmethod
    def local(
        cls,
        data_dir: Path,
        ports: StackPorts,
        *,
        review_public_keys: str,
        keep_documents: bool = False,
    ) -> Self:
        """The addresses of a stack keeping its data in ``data_dir``, on ``ports`` (chosen:
        the codec server, the inbox and the capacity store run when they have a port); with
        ``keep_documents`` the CLI stores documents in its input folder."""
        input_dir = data_dir / "inputs"
        return cls(
            temporal_address=f"{HOST}:{ports.temporal}",
            ui_url=None if ports.ui is None else f"http://{HOST}:{ports.ui}",
            sqs_endpoint_url=f"http://{HOST}:{ports.sqs}",
            openai_base_url=f"http://{HOST}:{ports.llm}/v1",
            vector_store_path=data_dir / "vectors",
            document_store_url=f"sqlite:///{data_dir / 'documents.db'}",
            ledger_url=f"sqlite:///{data_dir / 'ledger.db'}",
            input_dir=input_dir,
            review_public_keys=review_public_keys,
            reviewer_key_file=data_dir / "reviewer-key",
            codec_server_url=None if ports.codec is None else f"http://{HOST}:{ports.codec}",
            inbox_url=None if ports.inbox is None else f"http://{HOST}:{ports.inbox}",
            capacity_store_url=(
                None if ports.capacity is None else f"redis://{HOST}:{ports.capacity}/0"
            ),
            claim_check_dir=input_dir if keep_documents else None,
        )


@dataclass(frozen=True)
class StackPorts:
    """The ports of the stack's servers; None: picked free (``ui`` None: headless; the codec
    server, inbox and capacity store: not run, once `chosen`)."""

    temporal: int | None = None
    ui: int | None = None
    sqs: int | None = None
    llm: int | None = None
    codec: int | None = None
    inbox: int | None = None
    capacity: int | None = None

    def chosen(self, *, codec: bool, inbox: bool, capacity: bool) -> StackPorts:
        """Every port the stack uses, those not given picked free and distinct from the
        others; the optional servers' ports only when they run (else None)."""
        taken = {port for port in vars(self).values() if port}

        def port(given: int | None, used: bool = True) -> int | None:
            return (given or _distinct_free_port(taken)) if used else None

        return replace(
            self,
            temporal=port(self.temporal),
            sqs=port(self.sqs),
            llm=port(self.llm),
            codec=port(self.codec, codec),
            inbox=port(self.inbox, inbox),
            capacity=port(self.capacity, capacity),
        )


def _distinct_free_port(taken: set[int]) -> int:
    # Two free_port() calls in a row may return the same number; each server needs its own.
    while (port := free_port()) in taken:
        pass
    taken.add(port)
    return port
