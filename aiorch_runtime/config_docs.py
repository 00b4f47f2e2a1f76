"""What the configuration reference says about each setting besides its description.

Each `aiorch_runtime.config.Settings` field carries its description (``Field(description=)``)
and a `SettingDoc` in its ``Annotated`` metadata: the section it is listed in (the one whose
model declares it, ``aiorch_runtime.config.SECTIONS``), how its default reads, an example
value. `Section` is the one list of sections, in the order the reference shows them;
`OUTSIDE_VARIABLES` lists the variables the libraries read themselves (``temporalio.envconfig``,
the OpenTelemetry SDK), which no field holds.
``python -m aiorch.devstack docs`` writes ``docs/configuration.md`` and ``.env.example`` from
these; a test fails while either is stale, or when a field lacks its description or section.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Section(Enum):
    """A section of the configuration reference: its heading, and the paragraph under it
    (Markdown; links are relative to ``docs/``)."""

    TEMPORAL = (
        "Temporal connection",
        "Read the way the Temporal CLI and SDKs read it (`temporalio.envconfig`): the profile "
        "`TEMPORAL_PROFILE` of the TOML file `TEMPORAL_CONFIG_FILE`, with the standard "
        "`TEMPORAL_*` variables over it, resolved once at start; every process (worker, CLI, "
        "codec server, inbox, dev stack) connects alike. Recipes for Temporal Cloud and "
        "self-hosted mTLS: [Connecting to Temporal](deployment.md#connecting-to-temporal).",
    )
    LLM = (
        "LLM calls",
        "Any OpenAI-compatible server; only Chat Completions and Embeddings are used. Each "
        "attempt is one activity with the client's own retries off, so every attempt shows in "
        "the run's history; the workflow backs off between attempts.",
    )
    PIPELINES = (
        "Pipelines defined as data",
        "See [pipelines-as-data.md](pipelines-as-data.md).",
    )
    REVIEW = (
        "Review",
        "The operator's review policy is a floor and a ceiling: a request may ask for more "
        "review, fewer reviewers and shorter waits, never the reverse.",
    )
    AUTHENTICATION = (
        "Signed reviews and starts",
        "Who may decide a review, and who may start a run on whose budget: see "
        "[Reviewer authority](security.md#reviewer-authority) and "
        "[security.md](security.md).",
    )
    INBOX = (
        "Review inbox and notifications",
        "The web page reviewers decide in (`aiorch inbox serve`), and the webhook that tells "
        "them a run waits: see [Review inbox](inbox.md).",
    )
    INPUTS = (
        "Inputs",
        "Large documents travel by reference (a claim check), never in history; a worker "
        "reads a referenced input only from the places listed here. See "
        "[Bounded inputs](security.md#bounded-inputs).",
    )
    PAYLOAD_PROTECTION = (
        "Payload encryption and the codec server",
        "Without keys every input, result and signal sits in plain text in Temporal's history. "
        "See [Data protection](security.md#data-protection).",
    )
    STORES = (
        "Stores",
        "The vector store (Qdrant) and the document pipeline's SQL store.",
    )
    DEAD_LETTERS = (
        "Dead-letter queue and AWS",
        "Runs that give up are sent to an SQS queue, with their failure and without their "
        "content when payloads are encrypted.",
    )
    BUDGETS = (
        "Costs, budgets and shared capacity",
        "Prices, cost ceilings and the limits every worker shares through one Redis: see "
        "[capacity.md](capacity.md).",
    )
    OBSERVABILITY = (
        "Observability",
        "Traces and GenAI metrics over OTLP, and the worker's Prometheus endpoint.",
    )
    LEDGER = (
        "Run ledger",
        "Where `aiorch ledger sync` and `aiorch ledger follow` keep the runs they project from "
        "the event histories, and `aiorch ledger sql` and `report` read them: see "
        "[ledger.md](ledger.md).",
    )
    LAB = (
        "Replay lab",
        "The task queue the workers run the replay lab's forks on, and the tenant their model "
        "calls spend as: see [lab.md](lab.md).",
    )
    EXPERIMENTS = (
        "Rollout experiments",
        "Prompt and model variants of a pipeline, chosen per run from its id, and the stop "
        "rule that halts a losing one: see [rollouts.md](rollouts.md).",
    )
    WORKER = (
        "Worker",
        "Slots, pollers, cache, probes and versions of one worker process: see "
        "[Running workers](deployment.md#running-workers) and "
        "[performance.md](performance.md).",
    )

    def __init__(self, title: str, about: str) -> None:
        self.title = title
        self.about = about


@dataclass(frozen=True)
class SettingDoc:
    """A setting's place in the configuration reference (``Annotated`` metadata of a field).

    Attributes:
        section: where it is listed.
        default: how its default reads (Markdown), where the value alone says too little
            (None: the value itself, or "unset").
        example: a value to show for a setting that has none by default.
        own_variable: False for a field resolved from other variables (listed in
            `OUTSIDE_VARIABLES`), never read from a variable of its own name.
    """

    section: Section
    default: str | None = None
    example: str | None = None
    own_variable: bool = True


@dataclass(frozen=True)
class OutsideVariable:
    """A variable a library reads itself, listed in its section of the reference;
    ``env_example`` is its ``.env.example`` line (``NAME=value``, shown commented out)."""

    name: str
    section: Section
    reader: str
    default: str
    description: str
    env_example: str


_ENVCONFIG = "`temporalio.envconfig`"
_OPENAI = "the `openai` client"
_BOTO3 = "boto3"
_OTEL = "the OpenTelemetry SDK"

OUTSIDE_VARIABLES = (
    OutsideVariable(
        "TEMPORAL_TLS",
        Section.TEMPORAL,
        _ENVCONFIG,
        "on with an API key or any TLS setting",
        "`true` or `false` forces TLS on or off; with it on and no CA named, the server's "
        "certificate is checked against the system's roots.",
        "TEMPORAL_TLS=true",
    ),
    OutsideVariable(
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        Section.TEMPORAL,
        _ENVCONFIG,
        "unset",
        "The client certificate for mutual TLS, read at start (or inline, as "
        "`TEMPORAL_TLS_CLIENT_CERT_DATA`); needs the key.",
        "TEMPORAL_TLS_CLIENT_CERT_PATH=/run/secrets/temporal-client.pem",
    ),
    OutsideVariable(
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        Section.TEMPORAL,
        _ENVCONFIG,
        "unset",
        "The client certificate's private key, read at start (or inline, as "
        "`TEMPORAL_TLS_CLIENT_KEY_DATA`); needs the certificate.",
        "TEMPORAL_TLS_CLIENT_KEY_PATH=/run/secrets/temporal-client.key",
    ),
    OutsideVariable(
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
        Section.TEMPORAL,
        _ENVCONFIG,
        "the system's roots",
        "The CA that signed the frontend's certificate, read at start (or inline, as "
        "`TEMPORAL_TLS_SERVER_CA_CERT_DATA`).",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH=/etc/temporal/ca.pem",
    ),
    OutsideVariable(
        "TEMPORAL_TLS_SERVER_NAME",
        Section.TEMPORAL,
        _ENVCONFIG,
        "the address's host",
        "The name the frontend's certificate must carry, when it is not the address's host.",
        "TEMPORAL_TLS_SERVER_NAME=temporal.internal.example",
    ),
    OutsideVariable(
        "TEMPORAL_GRPC_META_<NAME>",
        Section.TEMPORAL,
        _ENVCONFIG,
        "unset",
        "A gRPC header sent on every call: `TEMPORAL_GRPC_META_X_TEAM=ml` sends `x-team: ml`.",
        "TEMPORAL_GRPC_META_X_TEAM=ml",
    ),
    OutsideVariable(
        "OPENAI_ORG_ID",
        Section.LLM,
        _OPENAI,
        "unset",
        "The organization sent with every call (`OpenAI-Organization`), for a key that "
        "belongs to several.",
        "OPENAI_ORG_ID=org-...",
    ),
    OutsideVariable(
        "OPENAI_PROJECT_ID",
        Section.LLM,
        _OPENAI,
        "unset",
        "The project sent with every call (`OpenAI-Project`).",
        "OPENAI_PROJECT_ID=proj_...",
    ),
    OutsideVariable(
        "AWS_ACCESS_KEY_ID",
        Section.DEAD_LETTERS,
        _BOTO3,
        "boto3's chain",
        "The access key of the SQS and S3 clients, with `AWS_SECRET_ACCESS_KEY` (and "
        "`AWS_SESSION_TOKEN` for temporary credentials). Unset, boto3 looks further: "
        "`AWS_PROFILE`, the shared credentials file, an instance or task role.",
        "AWS_ACCESS_KEY_ID=AKIA...",
    ),
    OutsideVariable(
        "AWS_SECRET_ACCESS_KEY",
        Section.DEAD_LETTERS,
        _BOTO3,
        "boto3's chain",
        "The secret of that access key. boto3's, with no `_FILE` form: a credentials file "
        "(`AWS_SHARED_CREDENTIALS_FILE`) or a role keeps it out of the environment.",
        "AWS_SECRET_ACCESS_KEY=<secret>",
    ),
    OutsideVariable(
        "AWS_PROFILE",
        Section.DEAD_LETTERS,
        _BOTO3,
        "`default`",
        "The profile of the shared AWS configuration and credentials files.",
        "AWS_PROFILE=prod",
    ),
    OutsideVariable(
        "OTEL_EXPORTER_OTLP_HEADERS",
        Section.OBSERVABILITY,
        _OTEL,
        "unset",
        "Headers on every export (`key=value,...`, values URL-encoded: an API key, say); like "
        "the variables below, each has `_TRACES_` and `_METRICS_` variants for one signal.",
        "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token>",
    ),
    OutsideVariable(
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        Section.OBSERVABILITY,
        _OTEL,
        "10 s",
        "How long one export may take.",
        "OTEL_EXPORTER_OTLP_TIMEOUT=10",
    ),
    OutsideVariable(
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        Section.OBSERVABILITY,
        _OTEL,
        "none",
        "`gzip` compresses exports.",
        "OTEL_EXPORTER_OTLP_COMPRESSION=gzip",
    ),
    OutsideVariable(
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        Section.OBSERVABILITY,
        _OTEL,
        "the system's roots",
        "The CA of the collector's certificate (`OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` and "
        "`_CLIENT_KEY` for mutual TLS).",
        "OTEL_EXPORTER_OTLP_CERTIFICATE=/etc/aiorch/collector-ca.pem",
    ),
    OutsideVariable(
        "OTEL_METRIC_EXPORT_INTERVAL",
        Section.OBSERVABILITY,
        _OTEL,
        "60000 (ms)",
        "How often the GenAI metrics are exported over OTLP, in milliseconds.",
        "OTEL_METRIC_EXPORT_INTERVAL=60000",
    ),
    OutsideVariable(
        "OTEL_RESOURCE_ATTRIBUTES",
        Section.OBSERVABILITY,
        _OTEL,
        "unset",
        "More resource attributes on spans and OTLP metrics (`key=value,...`).",
        "OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod",
    ),
)
