"""Configuration: the only code that reads the environment.

One frozen, typed settings object is built at process start (``load_settings``). Every variable
has a local default that works with the embedded stack (``make dev``), so nothing needs setting
to try the project; production sets the addresses. An invalid value fails at once with one line
that names the variable. Each field carries what the configuration reference says about it: its
description and a `SettingDoc` (``aiorch_runtime.config_docs``), from which ``make graph`` writes
``docs/configuration.md`` and ``.env.example``.

The connection to Temporal is read the way the Temporal CLI and SDKs read it
(``temporalio.envconfig``): the profile ``TEMPORAL_PROFILE`` (default ``default``) of the TOML
file ``TEMPORAL_CONFIG_FILE`` (default ``~/.config/temporalio/temporal.toml``), overridden by the
standard ``TEMPORAL_*`` variables (those no field holds are listed in
``config_docs.OUTSIDE_VARIABLES``). The result is resolved once, here, into plain settings fields
(certificates read, secrets masked), so every process connects alike
(``aiorch_runtime.connection.connect``).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from aiorch_runtime.config_docs import Section, SettingDoc
from aiorch_runtime.config_sources import (
    SECRET_FILE_FIELDS,
    secrets_from_files,
    split_list,
    temporal_from_profile,
)
from aiorch_runtime.errors import ConfigError as ConfigError
from aiorch_runtime.review_policies import PolicySpec, check_groups, check_policies, policy_for
from aiorch_runtime.temporal_profile import TemporalTls
from workflows.engine.identity import KeySpecError, parse_requester_keys, parse_review_keys
from workflows.payloads import DEFAULT_TENANT, TENANT_PATTERN, RequesterKey, ReviewKey

DEFAULT_LLM_PORT = 8700
DEFAULT_SQS_PORT = 8701
DEFAULT_CODEC_PORT = 8702
DEFAULT_INBOX_PORT = 8703
DEFAULT_METRICS_PORT = 9464
DEFAULT_HEALTH_PORT = 9465
DEFAULT_TEMPORAL_ADDRESS = "localhost:7233"
DEFAULT_TEMPORAL_NAMESPACE = "default"
# The largest document a run may reference (MAX_INPUT_BYTES): the claim check and the workers'
# input loader both refuse a larger one.
DEFAULT_MAX_INPUT_BYTES = 20 * 1024 * 1024
# What a document may expand to, and what extracting its text may take: a few-kB PDF can show
# one compressed stream of millions of characters on each of its pages.
DEFAULT_MAX_PDF_PAGES = 500
# About a million tokens: more than any model's context window takes in one call.
DEFAULT_MAX_DOCUMENT_CHARS = 4_000_000
DEFAULT_MAX_EXTRACT_MEMORY_BYTES = 512 * 1024 * 1024
DEFAULT_MAX_EXTRACT_CPU_S = 60
# The document pipeline's SQL store: an SQLite file next to the embedded vector store.
DEFAULT_DOCUMENT_STORE_URL = "sqlite:///.data/documents.db"


class ModelPrice(BaseModel):
    """US dollars per 1,000 tokens, for each kind of token (an ``LLM_PRICE_TABLE`` entry).

    ``cached_prompt``: the price of a prompt token the provider read from its prompt cache
    (``usage.prompt_tokens_details.cached_tokens``; None: the same as ``prompt``). ``batch``:
    the share of every rate a call through the provider's batch API pays (OpenAI's: half).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)
    cached_prompt: float | None = Field(default=None, ge=0)
    batch: float = Field(default=0.5, gt=0, le=1)


PriceTable = Mapping[str, ModelPrice]


class RateLimit(BaseModel):
    """A model's shared limits per minute (an ``LLM_RATE_LIMITS`` entry); None = not limited."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)


RateLimits = Mapping[str, RateLimit]

# The simulator's models, with made-up but plausible figures, so the local stack shows a cost;
# production sets the real prices of the models it uses.
DEFAULT_PRICE_TABLE: Mapping[str, ModelPrice] = MappingProxyType(
    {
        "sim-large": ModelPrice(prompt=0.005, completion=0.015, cached_prompt=0.00125),
        "sim-small": ModelPrice(prompt=0.0005, completion=0.0015, cached_prompt=0.000125),
    }
)


class Settings(BaseSettings):
    """Every setting, each read from the environment variable of the same name (upper case)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", env_prefix="")

    # Temporal. Address, namespace and API key: a variable of that name wins over the profile,
    # the profile over the default (config_sources.temporal_from_profile).
    temporal_address: Annotated[
        str, SettingDoc(Section.TEMPORAL, default="the profile's, else `localhost:7233`")
    ] = Field(
        default=DEFAULT_TEMPORAL_ADDRESS,
        min_length=3,
        description="The Temporal frontend, `host:port`.",
    )
    temporal_namespace: Annotated[
        str, SettingDoc(Section.TEMPORAL, default="the profile's, else `default`")
    ] = Field(
        default=DEFAULT_TEMPORAL_NAMESPACE,
        min_length=1,
        description="The namespace every process works in; the codec server encodes for it.",
    )
    temporal_profile: Annotated[
        str | None, SettingDoc(Section.TEMPORAL, default="`default`", example="cloud")
    ] = Field(
        default=None,
        description="The profile to read from the profile file; a profile the file lacks is "
        "an error.",
    )
    temporal_config_file: Annotated[
        Path | None,
        SettingDoc(
            Section.TEMPORAL,
            default="`~/.config/temporalio/temporal.toml`, if it exists",
            example="/etc/temporal/temporal.toml",
        ),
    ] = Field(
        default=None,
        description="The Temporal CLI's connection profile file (TOML, what `temporal config "
        "set` writes); a file named here that does not exist is an error.",
    )
    temporal_api_key: Annotated[
        SecretStr | None,
        SettingDoc(Section.TEMPORAL, default="the profile's, else unset", example="<key>"),
    ] = Field(
        default=None,
        description="The API key sent on every call (Temporal Cloud); turns TLS on.",
    )
    temporal_api_key_file: Path | None = None
    # Resolved from the profile and the TEMPORAL_TLS* / TEMPORAL_GRPC_META_* variables, never
    # parsed from one variable of these names. None = plain TCP (the local dev server).
    temporal_tls: Annotated[
        TemporalTls | None, NoDecode, SettingDoc(Section.TEMPORAL, own_variable=False)
    ] = Field(
        default=None,
        description="TLS to the frontend, from the profile and the `TEMPORAL_TLS*` variables; "
        "unset: plain TCP.",
    )
    temporal_grpc_meta: Annotated[
        dict[str, str], NoDecode, SettingDoc(Section.TEMPORAL, own_variable=False)
    ] = Field(
        default_factory=dict,
        repr=False,
        description="gRPC headers on every call, from the profile and the "
        "`TEMPORAL_GRPC_META_*` variables.",
    )
    temporal_task_queue: Annotated[str, SettingDoc(Section.TEMPORAL)] = Field(
        default="ai-orchestrator",
        min_length=1,
        description="The task queue the workers poll and the CLI starts (and redrives) runs on.",
    )
    temporal_ui_url: Annotated[str, SettingDoc(Section.TEMPORAL)] = Field(
        default="http://localhost:8233",
        description="The Temporal Web UI: the run links the CLI and the inbox show, and the "
        "one origin the codec server admits (CORS).",
    )

    # LLM
    openai_base_url: Annotated[
        str, SettingDoc(Section.LLM, default="`http://127.0.0.1:8700/v1` (the simulator)")
    ] = Field(
        default=f"http://127.0.0.1:{DEFAULT_LLM_PORT}/v1",
        description="Any OpenAI-compatible server (Chat Completions and Embeddings only).",
    )
    openai_api_key: Annotated[SecretStr, SettingDoc(Section.LLM)] = Field(
        default=SecretStr("sim-local-key"),
        description="The API key for `OPENAI_BASE_URL` (the default is the simulator's).",
    )
    openai_api_key_file: Path | None = None
    llm_model: Annotated[str, SettingDoc(Section.LLM)] = Field(
        default="sim-large", min_length=1, description="The model every chat call tries first."
    )
    llm_fallback_model: Annotated[str | None, SettingDoc(Section.LLM)] = Field(
        default="sim-small",
        description="The model a step calls once it has failed `LLM_FALLBACK_AFTER` times in "
        "a row; empty: no fallback. A pipeline file's step may name its own.",
    )
    llm_fallback_after: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=2,
        ge=1,
        le=100,
        description="Failed attempts in a row before a step calls `LLM_FALLBACK_MODEL`.",
    )
    embedding_model: Annotated[str, SettingDoc(Section.LLM)] = Field(
        default="sim-embed", min_length=1, description="The embeddings model."
    )
    llm_timeout_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="How long one chat or embeddings call may take (its activity gets 15 s more).",
    )
    llm_max_attempts: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=5,
        ge=1,
        le=100,
        description="Failed attempts in a row after which a step gives up and the run is "
        "dead-lettered; a request's `options.llm_max_attempts` may only lower it.",
    )
    llm_temperature: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=0.2, ge=0, le=2, description="The sampling temperature of every chat call."
    )
    llm_backoff_initial_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="The longest wait after a step's first failed attempt: each wait is drawn "
        "between 0 and a ceiling that doubles with every failure in a row (full jitter), never "
        "shorter than the provider's Retry-After.",
    )
    llm_backoff_max_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=60.0,
        gt=0,
        le=86400,
        description="The largest ceiling of that wait.",
    )
    llm_max_output_tokens: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=4096,
        ge=1,
        le=1_000_000,
        description="The reply limit sent with every chat call (`max_tokens`); reserved, with "
        "the prompt's estimate, against `LLM_RATE_LIMITS` and budgets before the call.",
    )
    max_reply_chars: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=100_000,
        ge=1,
        le=1024 * 1024,
        description="The longest reply kept: a longer one fails its attempt for good "
        "(`LlmReplyTooLarge`) and never enters history.",
    )

    pipelines_dir: Annotated[
        Path | None,
        SettingDoc(Section.PIPELINES, default="unset (no pipeline files)", example="pipelines"),
    ] = Field(
        default=None,
        description="The folder of pipeline files (`*.yaml`, top level) a worker runs and the "
        "operator's tools read; a worker with a file that has a problem does not start.",
    )

    pipeline_modules: Annotated[
        list[str], NoDecode, SettingDoc(Section.PIPELINES, example="acme.pipelines.translate")
    ] = Field(
        default_factory=list,
        description="Importable modules (comma-separated), each with a pipeline written in "
        "Python (its `PIPELINE`), that the worker runs and the operator's tools know besides "
        "the shipped ones (docs/extending.md).",
    )

    # Human review
    review_min: Annotated[Literal["never", "auto", "always"], SettingDoc(Section.REVIEW)] = Field(
        default="auto",
        description="The least review any run gets: `never` < `auto` (when the model asks for "
        "it) < `always`; a request may only raise it.",
    )
    document_review_min: Annotated[
        Literal["never", "auto", "always"], SettingDoc(Section.REVIEW)
    ] = Field(
        default="always",
        description="The least review a document run gets (with `REVIEW_MIN`, the higher "
        "counts): the fields it stores are model output, which the document steers, so by "
        "default a person approves them; `auto` stores valid fields unreviewed.",
    )
    allowed_reviewers: Annotated[
        list[str] | None,
        NoDecode,
        SettingDoc(Section.REVIEW, default="unset (anyone)", example="alice,bob"),
    ] = Field(
        default=None,
        description="Who may review a run, comma-separated; a request may only narrow the set.",
    )
    review_timeout_s: Annotated[float, SettingDoc(Section.REVIEW)] = Field(
        default=24 * 3600.0,
        gt=0,
        description="How long a run waits for a review before it escalates (notified again); "
        "a request's options may only shorten it.",
    )
    escalation_timeout_s: Annotated[float, SettingDoc(Section.REVIEW)] = Field(
        default=24 * 3600.0,
        gt=0,
        description="How long an escalated run waits for a review before it is dead-lettered; "
        "a request's options may only shorten it.",
    )
    max_feedback_chars: Annotated[int, SettingDoc(Section.REVIEW)] = Field(
        default=4000,
        ge=1,
        le=16 * 1024,
        description="The longest feedback a review decision may carry; a longer one is refused.",
    )
    reedit_rounds_per_run: Annotated[int, SettingDoc(Section.REVIEW)] = Field(
        default=50,
        ge=1,
        le=1000,
        description="Review rounds after which a reedit loop continues as a new run, so its "
        "history stays small.",
    )

    # Signed reviews and starts
    review_auth: Annotated[Literal["required", "off"], SettingDoc(Section.AUTHENTICATION)] = Field(
        default="required",
        description="`required`: a worker without `REVIEW_PUBLIC_KEYS` refuses to start. `off`: "
        "unsigned reviews are accepted, for a sandbox (the worker warns at every start, and "
        "refuses to start if keys are set too).",
    )
    review_public_keys: Annotated[
        str | None,
        SettingDoc(
            Section.AUTHENTICATION,
            default="unset (a worker then refuses to start, unless `REVIEW_AUTH=off`)",
            example="<the REVIEW_PUBLIC_KEYS line of: aiorch keys reviewer alice>",
        ),
    ] = Field(
        default=None,
        description="`key_id:base64 Ed25519 public key[:who]` entries (comma- or "
        "newline-separated): every review must carry a token signed by one of them. `who` is "
        "the reviewers that key may sign for (`alice|bob`, or `*` for an identity provider such "
        "as the review inbox); without it, only the reviewer named `key_id`. Keys that hold no "
        "key (only comments) are refused.",
    )
    review_public_keys_file: Path | None = None
    reviewer_key: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.AUTHENTICATION,
            example="<the REVIEWER_KEY line of: aiorch keys reviewer alice>",
        ),
    ] = Field(
        default=None,
        description="The CLI's key for signing reviews: `key_id:base64 Ed25519 private key` "
        "(`aiorch keys reviewer NAME` makes one).",
    )
    reviewer_key_file: Path | None = None
    review_token_ttl_s: Annotated[float, SettingDoc(Section.AUTHENTICATION)] = Field(
        default=600.0,
        gt=0,
        le=7 * 86400,
        description="How long a signed review or budget decision stays valid after it is "
        "signed (checked against workflow time).",
    )
    requester_public_keys: Annotated[
        str | None,
        SettingDoc(
            Section.AUTHENTICATION,
            default="unset (starts are not authenticated)",
            example="alice:<base64 public key>:acme",
        ),
    ] = Field(
        default=None,
        description="`requester:base64 Ed25519 public key:tenant` entries. Set, every start "
        "must carry a claim signed by one of them, and the run's requester and tenant are the "
        "key's (a request may not name others); unset, a request's `requested_by` and `tenant` "
        "are whatever it says.",
    )
    requester_public_keys_file: Path | None = None
    requester_key: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.AUTHENTICATION,
            example="<the REQUESTER_KEY line of: aiorch keys requester alice --tenant acme>",
        ),
    ] = Field(
        default=None,
        description="The CLI's key for signing starts: `requester:base64 Ed25519 private key` "
        "(`aiorch keys requester NAME --tenant T` makes one).",
    )
    requester_key_file: Path | None = None

    review_policies: Annotated[
        dict[str, PolicySpec],
        NoDecode,
        SettingDoc(
            Section.REVIEW,
            default="unset (one decision from one allowed reviewer decides a round)",
            example='{"documents": {"stages": [{"group": "finance", "quorum": 2}]}}',
        ),
    ] = Field(
        default_factory=dict,
        description="Review policies per pipeline written in Python (`llm`, `documents`; a "
        "pipeline file sets its review steps' own) or per pipeline and tenant "
        "(`documents@acme`), JSON: stages (a group, its quorum, its deadline), the rejections "
        "that end a round, auto-approve rules "
        "([reviews.md](reviews.md)). Each run keeps the policy it was planned with.",
    )
    review_groups: Annotated[
        dict[str, list[str]],
        NoDecode,
        SettingDoc(
            Section.REVIEW, default="unset (no groups)", example='{"finance": ["alice", "bob"]}'
        ),
    ] = Field(
        default_factory=dict,
        description="The members of the review groups that policies name, JSON; a member must "
        "also be in `ALLOWED_REVIEWERS` (when set).",
    )

    # The review inbox and notifications
    inbox_url: Annotated[
        str | None, SettingDoc(Section.INBOX, example="https://review.example.com")
    ] = Field(
        default=None,
        description="Where reviewers open the review inbox (`https://...` in production): the "
        "links in notifications and in `aiorch start`'s output. Anything but `http://` on a "
        "loopback host makes the session cookie `Secure`; required when the inbox listens "
        "beyond loopback.",
    )
    inbox_host: Annotated[str, SettingDoc(Section.INBOX)] = Field(
        default="127.0.0.1", description="The address the review inbox listens on."
    )
    inbox_port: Annotated[int, SettingDoc(Section.INBOX)] = Field(
        default=DEFAULT_INBOX_PORT, ge=0, le=65535, description="The review inbox's port."
    )
    inbox_signing_key: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.INBOX,
            default="unset (required to run the inbox)",
            example="<the INBOX_SIGNING_KEY line of: aiorch inbox new-key>",
        ),
    ] = Field(
        default=None,
        description="The inbox's Ed25519 key, `inbox:base64 private key` (`aiorch inbox "
        "new-key`); its `inbox:KEY:*` entry goes into the workers' `REVIEW_PUBLIC_KEYS`.",
    )
    inbox_signing_key_file: Path | None = None
    inbox_tokens_file: Annotated[
        Path | None, SettingDoc(Section.INBOX, example="/etc/aiorch/inbox-tokens")
    ] = Field(
        default=None,
        description="Reviewers' login tokens, one `NAME:sha256:HEX` line each (`aiorch inbox "
        "new-token NAME`), re-read when it changes. The inbox needs this or "
        "`INBOX_USER_HEADER`.",
    )
    inbox_user_header: Annotated[
        str | None,
        SettingDoc(Section.INBOX, default="unset (not trusted)", example="X-Forwarded-User"),
    ] = Field(
        default=None,
        pattern=r"^[A-Za-z0-9-]{1,64}$",
        description="The header an authenticating proxy in front of the inbox puts the "
        "reviewer's name in; trusted only when set.",
    )
    inbox_session_ttl_s: Annotated[float, SettingDoc(Section.INBOX)] = Field(
        default=8 * 3600.0,
        gt=0,
        le=7 * 86400,
        description="How long an inbox login lasts, counted from the login (using it does not "
        "extend it; logging out ends it sooner).",
    )
    review_webhook_url: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.INBOX,
            default="unset (no notifications)",
            example="https://hooks.slack.com/services/...",
        ),
    ] = Field(
        default=None,
        description="A webhook called when a run starts waiting for review and when it "
        "escalates (a Slack incoming-webhook URL is a credential).",
    )
    review_webhook_url_file: Path | None = None
    review_webhook_format: Annotated[Literal["json", "slack"], SettingDoc(Section.INBOX)] = Field(
        default="json",
        description='`json`, or `slack` for Slack-compatible `{"text", "blocks"}` messages.',
    )

    # Inputs
    input_file_roots: Annotated[
        list[Path], NoDecode, SettingDoc(Section.INPUTS, example="/srv/inputs,/data/docs")
    ] = Field(
        default_factory=list,
        description="Directories `file://` inputs may come from (comma-separated), besides "
        "`CLAIM_CHECK_DIR`.",
    )
    input_s3_prefixes: Annotated[
        list[str], NoDecode, SettingDoc(Section.INPUTS, example="my-bucket/documents/")
    ] = Field(
        default_factory=list,
        description="`bucket/prefix` entries `s3://` inputs may come from (comma-separated), "
        "besides the `inputs/` prefix of `CLAIM_CHECK_BUCKET`.",
    )
    claim_check_bucket: Annotated[str, SettingDoc(Section.INPUTS)] = Field(
        default="ai-orchestrator-inputs",
        min_length=3,
        description="The S3 bucket the CLI stores documents in (under `inputs/`), unless "
        "`CLAIM_CHECK_DIR` is set; the workers keep PDFs' extracted texts under `texts/`.",
    )
    claim_check_dir: Annotated[
        Path | None, SettingDoc(Section.INPUTS, example="/shared/claims")
    ] = Field(
        default=None,
        description="A directory the CLI and the workers share, where the CLI stores documents "
        "instead of S3 (and the workers PDFs' extracted texts, under `texts/`).",
    )
    claim_check_threshold_bytes: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=32 * 1024,
        ge=1,
        description="An inline message larger than this is stored, and the run gets its reference.",
    )
    max_inline_message_bytes: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=256 * 1024,
        ge=1,
        le=256 * 1024,
        description="An inline message larger than this is refused (pass it as a file).",
    )
    max_input_bytes: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_INPUT_BYTES,
        ge=1,
        description="The largest document a run may reference: the CLI refuses to store a "
        "larger one and the workers to load it.",
    )
    s3_endpoint_url: Annotated[
        str | None,
        SettingDoc(Section.INPUTS, default="unset (AWS)", example="http://127.0.0.1:8701"),
    ] = Field(default=None, description="The S3 endpoint of `s3://` inputs and the claim check.")
    max_pdf_pages: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_PDF_PAGES,
        ge=1,
        description="A PDF with more pages fails its run (`DocumentTooLarge`) before any page "
        "is read.",
    )
    max_document_chars: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_DOCUMENT_CHARS,
        ge=1,
        description="A document whose text passes this many characters fails its run "
        "(`DocumentTooLarge`); a PDF's extraction stops as soon as it does.",
    )
    max_extract_memory_bytes: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_EXTRACT_MEMORY_BYTES,
        ge=128 * 1024 * 1024,
        description="The address space of the child process that extracts a PDF's text; a PDF "
        "that needs more fails its run (`DocumentTooLarge`).",
    )
    max_extract_cpu_s: Annotated[int, SettingDoc(Section.INPUTS)] = Field(
        default=DEFAULT_MAX_EXTRACT_CPU_S,
        ge=1,
        description="The CPU seconds that child may use; a PDF that needs more fails its run "
        "(`DocumentTooLarge`).",
    )

    # Payload encryption and the codec server. Secrets come from the variable or from a file
    # named by <NAME>_FILE, never from inputs; SecretStr keeps them out of reprs and logs.
    payload_keys: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.PAYLOAD_PROTECTION,
            default="unset (**no encryption**)",
            example="<the PAYLOAD_KEYS line of: aiorch keys payload>",
        ),
    ] = Field(
        default=None,
        description="The keys that encrypt payloads, `id:base64key` entries of 32-byte keys "
        "(comma- or newline-separated; `aiorch keys payload` makes one).",
    )
    payload_keys_file: Path | None = None
    payload_key_id: Annotated[
        str | None,
        SettingDoc(Section.PAYLOAD_PROTECTION, default="the only key", example="k2"),
    ] = Field(
        default=None,
        description="The key that encrypts new payloads (required with several keys; every key "
        "still decrypts).",
    )
    require_encryption: Annotated[bool, SettingDoc(Section.PAYLOAD_PROTECTION)] = Field(
        default=False,
        description="Refuse payloads that are not encrypted (a plaintext start fails); needs "
        "`PAYLOAD_KEYS`.",
    )
    codec_server_host: Annotated[str, SettingDoc(Section.PAYLOAD_PROTECTION)] = Field(
        default="127.0.0.1",
        description="The address the codec server (`aiorch codec-server`) listens on.",
    )
    codec_server_port: Annotated[int, SettingDoc(Section.PAYLOAD_PROTECTION)] = Field(
        default=DEFAULT_CODEC_PORT, ge=0, le=65535, description="The codec server's port."
    )
    codec_server_token: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.PAYLOAD_PROTECTION,
            default="unset (required to run the codec server)",
            example="<32 random characters or more>",
        ),
    ] = Field(
        default=None,
        description="The bearer token the codec server demands: at least 32 characters, 8 of "
        "them distinct.",
    )
    codec_server_token_file: Path | None = None

    # Stores
    vector_store_url: Annotated[
        str | None,
        SettingDoc(
            Section.STORES,
            default="unset (embedded, at `VECTOR_STORE_PATH`)",
            example="https://qdrant.internal:6333",
        ),
    ] = Field(default=None, description="A Qdrant server's URL (`https://` for TLS).")
    vector_store_api_key: Annotated[
        SecretStr | None, SettingDoc(Section.STORES, example="<key>")
    ] = Field(
        default=None,
        description="The Qdrant server's API key, sent with every request (use an `https://` "
        "URL); server mode only.",
    )
    vector_store_api_key_file: Path | None = None
    vector_store_ca_cert_path: Annotated[
        Path | None,
        SettingDoc(
            Section.STORES, default="unset (the system's roots)", example="/etc/aiorch/qdrant.pem"
        ),
    ] = Field(
        default=None,
        description="The CA that signed the Qdrant server's certificate (`https://` URLs only).",
    )
    vector_store_path: Annotated[str, SettingDoc(Section.STORES)] = Field(
        default=".data/vectors",
        description="The embedded store's folder; one worker process per folder (more workers "
        "need `VECTOR_STORE_URL`).",
    )
    vector_collection: Annotated[str, SettingDoc(Section.STORES)] = Field(
        default="ai-orchestrator", min_length=1, description="The Qdrant collection."
    )
    document_store_url: Annotated[SecretStr, SettingDoc(Section.STORES)] = Field(
        default=SecretStr(DEFAULT_DOCUMENT_STORE_URL),
        description="The document pipeline's SQL store of extracted fields (a `documents` "
        "table, created if missing): `sqlite:///PATH`, or PostgreSQL as "
        "`postgresql://user:password@host:port/db` (psycopg 3); empty: the default. The URL may "
        "hold a password.",
    )
    document_store_url_file: Path | None = None

    # Dead-letter queue (SQS)
    sqs_endpoint_url: Annotated[
        str | None,
        SettingDoc(Section.DEAD_LETTERS, default="unset (AWS)", example="http://127.0.0.1:8701"),
    ] = Field(default=None, description="The SQS endpoint of the dead-letter queue.")
    dlq_queue_name: Annotated[str, SettingDoc(Section.DEAD_LETTERS)] = Field(
        default="ai-orchestrator-dlq",
        min_length=1,
        max_length=80,
        description="The dead-letter queue.",
    )
    aws_region: Annotated[str, SettingDoc(Section.DEAD_LETTERS)] = Field(
        default="us-east-1", description="The region of the SQS and S3 clients."
    )

    # Costs, budgets and shared capacity (docs/capacity.md)
    # Decoded here (NoDecode), so a value that is not JSON is reported like any invalid value.
    llm_price_table: Annotated[
        dict[str, ModelPrice],
        NoDecode,
        SettingDoc(Section.BUDGETS, default="the simulator's models"),
    ] = Field(
        default_factory=lambda: dict(DEFAULT_PRICE_TABLE),
        description='US dollars per 1,000 tokens by model, JSON `{"model": {"prompt": USD, '
        '"completion": USD, "cached_prompt": USD, "batch": FACTOR}}` (the last two optional: '
        "the price of prompt tokens the provider read from its cache, and the batch lane's "
        "price as a share of the synchronous one): the cost metric, a run's `cost_usd` and "
        "every budget. A model missing from it is unpriced (no cost, nothing held against a "
        "budget).",
    )
    capacity_store_url: Annotated[
        SecretStr | None,
        SettingDoc(
            Section.BUDGETS,
            default="unset (nothing shared)",
            example="redis://:<password>@redis:6379/0",
        ),
    ] = Field(
        default=None,
        description="The Redis every worker shares for rate limits and tenant spend "
        "(`redis://[:password@]host:port/db`, `rediss://` for TLS); `LLM_RATE_LIMITS` and tenant "
        "budgets need it. The URL may hold a password.",
    )
    capacity_store_url_file: Path | None = None
    llm_rate_limits: Annotated[
        dict[str, RateLimit],
        NoDecode,
        SettingDoc(
            Section.BUDGETS,
            default="unset (not limited)",
            example='{"gpt-4o": {"rpm": 500, "tpm": 30000}}',
        ),
    ] = Field(
        default_factory=dict,
        description="Requests and tokens per minute per model at `OPENAI_BASE_URL`, JSON "
        '`{"model": {"rpm": N, "tpm": N}}`, shared by every worker.',
    )
    capacity_lease_s: Annotated[float, SettingDoc(Section.BUDGETS)] = Field(
        default=30.0,
        ge=1,
        le=3600,
        description="A reservation whose worker stops renewing it (it died) is given back "
        "after this (a spend reservation is charged in full); a run waiting for capacity "
        "checks in at least every two of these, and a place not kept leaves the queue.",
    )
    run_budget_usd: Annotated[
        float | None, SettingDoc(Section.BUDGETS, default="unset (none)", example="0.50")
    ] = Field(
        default=None,
        gt=0,
        description="A run's cost ceiling in USD; a request's `options.max_cost_usd` may lower it.",
    )
    tenant_budgets_usd: Annotated[
        dict[str, float],
        NoDecode,
        SettingDoc(Section.BUDGETS, default="unset (none)", example='{"acme": 25, "globex": 5}'),
    ] = Field(
        default_factory=dict,
        description='Each tenant\'s budget per UTC day in USD, JSON `{"tenant": USD}`. With '
        "this or `TENANT_BUDGET_DEFAULT_USD` set, a run naming any other tenant is refused.",
    )
    tenant_budget_default_usd: Annotated[
        float | None, SettingDoc(Section.BUDGETS, default="unset (none)", example="1")
    ] = Field(
        default=None,
        gt=0,
        description="The budget per UTC day of the one pool the runs that name no tenant share.",
    )
    budget_policy: Annotated[Literal["wait", "fail"], SettingDoc(Section.BUDGETS)] = Field(
        default="wait",
        description="A call that would cross a budget: `wait` for an operator's decision "
        "(`await_budget`; dead-lettered after `BUDGET_DECISION_TIMEOUT_S`), or `fail` "
        "(dead-lettered at once).",
    )
    budget_decision_timeout_s: Annotated[float, SettingDoc(Section.BUDGETS)] = Field(
        default=24 * 3600.0,
        gt=0,
        le=365 * 86400,
        description="How long a run waits for an operator's budget decision.",
    )

    # Model cost (docs/cost.md)
    llm_batch: Annotated[Literal["off", "allowed", "default"], SettingDoc(Section.LLM)] = Field(
        default="off",
        description="The provider's batch API (Files + Batches) at half the price: `off`; "
        "`allowed` (runs that ask for it, `options.lane=batch`, go through it); `default` (runs "
        "go through it unless they ask for the synchronous lane). Needs `CAPACITY_STORE_URL`; "
        "every worker of the task queue must run this release first.",
    )
    llm_batch_size: Annotated[int, SettingDoc(Section.LLM)] = Field(
        default=1000, ge=1, le=50_000, description="The most calls one batch holds (per model)."
    )
    llm_batch_delay_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=60.0,
        gt=0,
        le=6 * 3600,
        description="How long a group of batched calls waits for more after its first, unless "
        "it fills up first; then it is submitted.",
    )
    llm_batch_poll_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=300.0,
        ge=1,
        le=3600,
        description="The longest wait between two polls of a submitted batch (polls start "
        "sooner and double).",
    )
    llm_batch_wait_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=50 * 3600.0,
        ge=60,
        le=14 * 86400,
        description="How long a run waits for its batched call's answer, then takes its retry "
        "path.",
    )
    llm_prompt_cache_scope: Annotated[
        Literal["off", "pipeline", "tenant"], SettingDoc(Section.LLM)
    ] = Field(
        default="off",
        description="The `prompt_cache_key` sent with every chat call, so a provider routes "
        "calls that share a prefix to the same cache: `off` (none), `pipeline`, or `tenant` "
        "(the pipeline and the run's tenant).",
    )
    llm_result_cache_ttl_s: Annotated[float, SettingDoc(Section.LLM)] = Field(
        default=0.0,
        ge=0,
        le=90 * 86400,
        description="How long a model call identical to one that succeeded (model, messages, "
        "parameters, pipeline version; per tenant) is answered from the capacity store without "
        "calling the provider; `0` turns the result cache off. Needs `CAPACITY_STORE_URL`, "
        "and `REQUESTER_PUBLIC_KEYS` (else a request names any tenant: a worker refuses to "
        "start); a request may refuse it (`options.result_cache: false`).",
    )

    # Observability. The OTEL_* names are the standard OpenTelemetry variables.
    otel_exporter_otlp_endpoint: Annotated[
        str | None,
        SettingDoc(
            Section.OBSERVABILITY, default="unset (no export)", example="http://localhost:4317"
        ),
    ] = Field(
        default=None,
        description="Where traces and the GenAI client metrics go over OTLP; only this "
        "variable turns export on (a `_TRACES_` or `_METRICS_` variant alone does not).",
    )
    otel_exporter_otlp_protocol: Annotated[
        Literal["grpc", "http/protobuf"], SettingDoc(Section.OBSERVABILITY)
    ] = Field(default="grpc", description="The OTLP transport: `grpc` or `http/protobuf`.")
    otel_service_name: Annotated[str, SettingDoc(Section.OBSERVABILITY)] = Field(
        default="ai-orchestrator",
        min_length=1,
        description="`service.name` of spans and OTLP metrics, and the `service_name` label "
        "of the Prometheus metrics.",
    )
    otel_capture_content: Annotated[bool, SettingDoc(Section.OBSERVABILITY)] = Field(
        default=False,
        description="Put prompt, reply and transition detail text in spans. They may hold "
        "personal data, and spans are not encrypted.",
    )
    metrics_host: Annotated[str, SettingDoc(Section.OBSERVABILITY)] = Field(
        default="127.0.0.1",
        min_length=1,
        description="The address (an IP) where the worker serves Prometheus metrics "
        "(`/metrics`): `0.0.0.0` for a scraper on another host (the Docker image sets it). "
        "Loopback by default: the metrics name models, costs, tenants and the task queue.",
    )
    metrics_port: Annotated[int, SettingDoc(Section.OBSERVABILITY)] = Field(
        default=DEFAULT_METRICS_PORT,
        ge=0,
        le=65535,
        description="The port of `/metrics`; `0` turns it off. A port in use is logged and the "
        "worker runs without it.",
    )

    # Worker
    worker_max_concurrent_activities: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=200, ge=1, le=10000, description="Activities one worker runs at once."
    )
    worker_max_concurrent_workflow_tasks: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=100, ge=1, le=10000, description="Workflow tasks one worker runs at once."
    )
    # ~0.12 MiB per cached run (bench: 2,000 parked runs peak at ~450 MiB with 1000, ~565 with
    # 2000); a run evicted from the cache is replayed from history when it wakes.
    worker_max_cached_workflows: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=1000,
        ge=0,
        le=100000,
        description="Runs kept in the worker's cache (about 0.12 MiB each); an evicted run is "
        "replayed from history when it wakes. Below `WORKER_MAX_CONCURRENT_WORKFLOW_TASKS` (0 "
        "included) it is for debugging replays only, and the worker warns: every task then "
        "replays, and a run evicted during its local `fetch_prompt` waits out the 10 s "
        "workflow task timeout.",
    )
    worker_workflow_task_pollers: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=5,
        ge=2,
        le=1000,
        description="Concurrent long polls for workflow tasks (at least 2: the sticky and the "
        "normal queue).",
    )
    worker_activity_task_pollers: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=5, ge=1, le=1000, description="Concurrent long polls for activity tasks."
    )
    worker_shutdown_grace: Annotated[float, SettingDoc(Section.WORKER)] = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="On SIGTERM, the seconds activities in flight get to finish before they "
        "are cancelled (and retried elsewhere).",
    )
    health_host: Annotated[str, SettingDoc(Section.WORKER)] = Field(
        default="127.0.0.1",
        min_length=1,
        description="The address (an IP) where the worker serves `/healthz` (liveness) and "
        "`/readyz` (readiness): `0.0.0.0` for probes from another host (the Docker image sets "
        "it).",
    )
    health_port: Annotated[int, SettingDoc(Section.WORKER)] = Field(
        default=DEFAULT_HEALTH_PORT,
        ge=0,
        le=65535,
        description="The port of the probes; `0` turns them off. A port in use is logged and "
        "the worker runs without them.",
    )
    # Rolling deploys (README "Rolling deploys").
    worker_build_id: Annotated[
        str | None,
        SettingDoc(Section.WORKER, example="2026-11-30.1"),
    ] = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="This build's id (the image tag, say): the worker reports its version as "
        "`WORKER_DEPLOYMENT_NAME.WORKER_BUILD_ID`, which the Web UI shows.",
    )
    worker_deployment_name: Annotated[str, SettingDoc(Section.WORKER)] = Field(
        default="ai-orchestrator",
        min_length=1,
        max_length=255,
        pattern=r"^[^.]+$",
        description="The deployment the worker's version belongs to (no `.`).",
    )
    worker_versioning: Annotated[bool, SettingDoc(Section.WORKER)] = Field(
        default=False,
        description="Worker Versioning: the server routes tasks by build (needs "
        "`WORKER_BUILD_ID`).",
    )
    worker_versioning_behavior: Annotated[
        Literal["auto_upgrade", "pinned"], SettingDoc(Section.WORKER)
    ] = Field(
        default="auto_upgrade",
        description="What open runs do under Worker Versioning: `auto_upgrade` moves them to "
        "the current build at their next workflow task; `pinned` keeps each on the build that "
        "started it.",
    )

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: Any) -> Any:
        """Secrets from their files first, then the Temporal profile (which the API key's file
        may override); one validator, so the order is explicit."""
        if not isinstance(data, dict):
            return data
        return temporal_from_profile(secrets_from_files(data))

    @model_validator(mode="after")
    def _versioning_needs_a_build_id(self) -> Settings:
        if self.worker_versioning and self.worker_build_id is None:
            raise ConfigError("WORKER_VERSIONING=true needs WORKER_BUILD_ID (this build's id)")
        return self

    @field_validator("allowed_reviewers", mode="before")
    @classmethod
    def _split_reviewers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return split_list(value) or None
        return value

    @field_validator(
        "llm_price_table",
        "llm_rate_limits",
        "tenant_budgets_usd",
        "review_policies",
        "review_groups",
        mode="before",
    )
    @classmethod
    def _decode_json(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"not valid JSON ({err.msg} at position {err.pos})") from None

    @field_validator("tenant_budgets_usd")
    @classmethod
    def _tenant_budgets(cls, value: dict[str, float]) -> dict[str, float]:
        for tenant, usd in value.items():
            if not re.fullmatch(TENANT_PATTERN, tenant):
                raise ValueError(f"{tenant[:70]!r} is not a tenant name ({TENANT_PATTERN})")
            if not usd > 0:
                raise ValueError(f"the budget of {tenant!r} must be more than 0")
        return value

    @field_validator("review_groups")
    @classmethod
    def _review_groups(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        check_groups(value)
        return value

    @model_validator(mode="after")
    def _review_policies(self) -> Settings:
        try:
            check_policies(self.review_policies, self.review_groups)
        except ValueError as err:
            raise ConfigError(f"REVIEW_POLICIES: {err}") from None
        return self

    def review_policy(self, pipeline: str, tenant: str) -> tuple[str, PolicySpec] | None:
        """The review policy of ``pipeline``'s runs for ``tenant`` (its key and itself), if the
        operator set one (REVIEW_POLICIES: the tenant's, else the pipeline's)."""
        return policy_for(self.review_policies, pipeline, tenant)

    @field_validator("capacity_store_url")
    @classmethod
    def _store_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None  # set but empty = unset
        if not re.fullmatch(r"rediss?://\S+", value.get_secret_value()):
            raise ValueError("must be a redis:// or rediss:// URL")
        return value

    @field_validator("document_store_url")
    @classmethod
    def _document_store_url(cls, value: SecretStr) -> SecretStr:
        url = value.get_secret_value()
        if not url:
            return SecretStr(DEFAULT_DOCUMENT_STORE_URL)  # set but empty = the default
        if not re.fullmatch(r"(sqlite(\+pysqlite)?:///|postgres(ql)?(\+psycopg)?://)\S+", url):
            raise ValueError("must be sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB")
        return value

    @field_validator("metrics_host", "health_host")
    @classmethod
    def _listen_address(cls, value: str) -> str:
        # The SDK's Prometheus endpoint takes an address, not a name.
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(
                "must be an IP address to listen on (127.0.0.1, 0.0.0.0, ::)"
            ) from None
        return value

    @field_validator("input_file_roots", "input_s3_prefixes", "pipeline_modules", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        return split_list(value) if isinstance(value, str) else value

    @field_validator("input_s3_prefixes")
    @classmethod
    def _bucket_prefixes(cls, value: list[str]) -> list[str]:
        for entry in value:
            bucket, _, _ = entry.partition("/")
            if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
                raise ValueError(f"{entry!r} is not bucket/prefix (an S3 bucket name first)")
        return value

    @field_validator("inbox_url")
    @classmethod
    def _inbox_url(cls, value: str | None) -> str | None:
        if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else None

    @field_validator("review_webhook_url")
    @classmethod
    def _webhook_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None  # set but empty = unset
        if not re.fullmatch(r"https?://\S+", value.get_secret_value(), re.IGNORECASE):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _encryption_required_needs_keys(self) -> Settings:
        if self.require_encryption and self.payload_keys is None:
            raise ConfigError("REQUIRE_ENCRYPTION=true needs PAYLOAD_KEYS (or PAYLOAD_KEYS_FILE)")
        self.review_keys()
        self.requester_keys()
        if self.capacity_store_url is None and (self.llm_rate_limits or self.tenant_budgeted):
            raise ConfigError(
                "LLM_RATE_LIMITS and tenant budgets are shared by every worker: they need "
                "CAPACITY_STORE_URL (a Redis every worker reaches)"
            )
        if self.capacity_store_url is None and (self.batch_enabled or self.result_cache_on):
            raise ConfigError(
                "LLM_BATCH and LLM_RESULT_CACHE_TTL_S keep their calls and replies in the "
                "capacity store: they need CAPACITY_STORE_URL (a Redis every worker reaches)"
            )
        return self

    def review_keys(self) -> list[ReviewKey]:
        """The reviewer public keys (REVIEW_PUBLIC_KEYS); empty when none are configured.

        Raises:
            ConfigError: an entry is malformed, or the keys given hold no key at all (a file of
                comments, such as "# revoked pending rotation", is not "no authentication");
                checked when the settings are loaded.
        """
        source = "REVIEW_PUBLIC_KEYS_FILE" if self.review_public_keys_file else "REVIEW_PUBLIC_KEYS"
        if not self.review_public_keys and self.review_public_keys_file is None:
            return []  # unset, or set to nothing (= unset, as for every variable)
        try:
            keys = parse_review_keys(self.review_public_keys or "")
        except KeySpecError as err:
            raise ConfigError(f"{source}: {err}") from None
        if not keys:
            raise ConfigError(
                f"{source} holds no key (only comments or blank lines): list at least one "
                "key, or unset it"
            )
        return keys

    def requester_keys(self) -> list[RequesterKey]:
        """The requester public keys (REQUESTER_PUBLIC_KEYS); empty when start authentication
        is off.

        Raises:
            ConfigError: an entry is malformed, or the keys given hold no key at all.
        """
        source = (
            "REQUESTER_PUBLIC_KEYS_FILE"
            if self.requester_public_keys_file
            else "REQUESTER_PUBLIC_KEYS"
        )
        if not self.requester_public_keys and self.requester_public_keys_file is None:
            return []
        try:
            keys = parse_requester_keys(self.requester_public_keys or "")
        except KeySpecError as err:
            raise ConfigError(f"{source}: {err}") from None
        if not keys:
            raise ConfigError(f"{source} holds no key: list at least one key, or unset it")
        return keys

    @property
    def allowed_file_roots(self) -> list[Path]:
        """Directories ``file://`` inputs may come from: INPUT_FILE_ROOTS and CLAIM_CHECK_DIR."""
        extra = [self.claim_check_dir] if self.claim_check_dir is not None else []
        return [*self.input_file_roots, *extra]

    @property
    def allowed_s3_prefixes(self) -> list[str]:
        """``bucket/prefix`` entries ``s3://`` inputs may come from: INPUT_S3_PREFIXES and the
        claim-check bucket's ``inputs/`` prefix (where the starter stores documents)."""
        return [*self.input_s3_prefixes, f"{self.claim_check_bucket}/inputs/"]

    @property
    def notifications_enabled(self) -> bool:
        """True when a review webhook is configured (``REVIEW_WEBHOOK_URL``)."""
        return self.review_webhook_url is not None

    @property
    def batch_enabled(self) -> bool:
        """True when runs may go through the provider's batch API (``LLM_BATCH``)."""
        return self.llm_batch != "off"

    @property
    def result_cache_on(self) -> bool:
        """True when model replies are kept for identical calls (``LLM_RESULT_CACHE_TTL_S``)."""
        return self.llm_result_cache_ttl_s > 0

    @property
    def tenant_budgeted(self) -> bool:
        """True when some tenant has a daily budget (TENANT_BUDGETS_USD or the default)."""
        return bool(self.tenant_budgets_usd) or self.tenant_budget_default_usd is not None

    def tenant_budget(self, tenant: str) -> float | None:
        """The daily budget of ``tenant`` in USD, or None when it has none: its
        TENANT_BUDGETS_USD entry, else for the runs that name no tenant (``default``) the pool
        they share, TENANT_BUDGET_DEFAULT_USD."""
        pool = self.tenant_budget_default_usd if tenant == DEFAULT_TENANT else None
        return self.tenant_budgets_usd.get(tenant, pool)

    @property
    def tracing_enabled(self) -> bool:
        """True when an OTLP endpoint is configured."""
        return bool(self.otel_exporter_otlp_endpoint)


def _shown_input(item: Any) -> str:
    # A secret's rejected value must not reach the error line (or the log it ends up in).
    secret = bool(item["loc"]) and item["loc"][0] in SECRET_FILE_FIELDS
    return "'***'" if secret else repr(item.get("input"))


def load_settings() -> Settings:
    """Read the environment once.

    Raises:
        ConfigError: one line naming each variable whose value is invalid.
    """
    try:
        return Settings()
    except ValidationError as err:
        problems = [
            f"{'.'.join(str(p) for p in item['loc']).upper()}={_shown_input(item)}: {item['msg']}"
            for item in err.errors()
        ]
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
