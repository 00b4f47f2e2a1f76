"""docker-compose.yml and the files around it, read without Docker: loading, and the facts
the checks ask about (a service's environment, ports, mounts, health check, base images)."""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


COMPOSE_FILE = ROOT / "docker-compose.yml"


OTEL_FILE = ROOT / "otel-config.yaml"


APP_DOCKERFILE = ROOT / "Dockerfile"


DOCKERIGNORE = ROOT / ".dockerignore"


PROMETHEUS_FILE = ROOT / "deploy" / "prometheus.yml"


ELASTICMQ_FILE = ROOT / "deploy" / "elasticmq.conf"


GRAFANA_DIR = ROOT / "deploy" / "grafana"


DOCS_FILE = ROOT / "docs" / "docker.md"


SECRETS_DIR = ROOT / "deploy" / "secrets"


SECRETS_SCRIPT = SECRETS_DIR / "secrets.sh"


WRAPPER_SCRIPT = SECRETS_DIR / "with-secrets.sh"


REDIS_CONF = ROOT / "deploy" / "redis" / "redis.conf"


WORKER = "worker"


# The run ledger's follower (issue 41).
LEDGER = "ledger"


# The capacity store the workers share (issue 17).
CAPACITY_STORE = "redis"


# The variables the contract names for reaching other systems (DESIGN.md, "Environment").
CONTRACT_VARIABLES = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_TASK_QUEUE",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "LLM_MODEL",
    "LLM_FALLBACK_MODEL",
    "EMBEDDING_MODEL",
    "SQS_ENDPOINT_URL",
    "DLQ_QUEUE_NAME",
    "AWS_REGION",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "VECTOR_STORE_URL",
)


# A setting whose name ends like this says where something is or what it is called.
ADDRESS_OR_NAME_SUFFIXES = (
    "_address",
    "_url",
    "_endpoint",
    "_namespace",
    "_queue",
    "_model",
    "_name",
    "_region",
    "_key",
    "_collection",
)


# Address settings the stack leaves unset on purpose, and why.
NOT_WIRED = {
    "S3_ENDPOINT_URL": "no S3 stand-in in the stack; s3:// inputs go to AWS",
    "LEDGER_URL": "read by `aiorch ledger`, not the worker: the `ledger` service's URL file",
}


# Read by libraries, not by Settings.
EXTERNAL_VARIABLES = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}


# Set in compose ahead of the config field that reads it.
PENDING_SETTINGS: set[str] = set()


# The services the worker needs before it can poll: name -> the depends_on condition.
WORKER_DEPENDENCIES = {
    "temporal": "service_healthy",
    "temporal-namespace": "service_completed_successfully",
    "elasticmq": "service_healthy",
    "qdrant": "service_healthy",
    "llm-simulator": "service_healthy",
    "otel-collector": "service_healthy",
    CAPACITY_STORE: "service_healthy",
}


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@functools.cache
def compose_document() -> dict[str, Any]:
    data = load_yaml(COMPOSE_FILE)
    assert isinstance(data, dict), f"{COMPOSE_FILE.name} is not a mapping"
    return data


def compose_services() -> dict[str, dict[str, Any]]:
    services = compose_document()["services"]
    assert isinstance(services, dict)
    return services


def redis_conf() -> dict[str, list[str]]:
    """deploy/redis/redis.conf: each directive (lower case) -> the arguments Redis uses, its last
    occurrence's."""
    directives: dict[str, list[str]] = {}
    for line in REDIS_CONF.read_text(encoding="utf-8").splitlines():
        words = shlex.split(line, comments=True)
        if words:
            directives[words[0].lower()] = words[1:]
    return directives


@functools.cache
def otel_config() -> dict[str, Any]:
    data = load_yaml(OTEL_FILE)
    assert isinstance(data, dict)
    return data


@functools.cache
def prometheus_config() -> dict[str, Any]:
    data = load_yaml(PROMETHEUS_FILE)
    assert isinstance(data, dict)
    return data


def env_of(spec: Mapping[str, Any]) -> dict[str, str | None]:
    """A service's environment, whichever of the two compose forms it uses; None marks a
    variable passed through from the shell that runs compose (``NAME`` without a value)."""
    raw = spec.get("environment") or {}
    if isinstance(raw, list):
        pairs = (str(item).partition("=") for item in raw)
        return {key: value if sep else None for key, sep, value in pairs}
    return {str(key): None if value is None else str(value) for key, value in raw.items()}


def service_environment(service: str) -> dict[str, str]:
    """A service's environment as a dict of strings (a pass-through variable reads as "")."""
    return {key: value or "" for key, value in env_of(compose_services()[service]).items()}


def service_depends_on(service: str) -> dict[str, str]:
    """A service's dependencies, name -> condition (the short list form means started)."""
    raw = compose_services()[service].get("depends_on") or {}
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in raw.items()}


def one_shot_services() -> set[str]:
    """Services some other service waits on to finish: setup jobs, not servers."""
    return {
        target
        for name in compose_services()
        for target, condition in service_depends_on(name).items()
        if condition == "service_completed_successfully"
    }


def container_ports(service: str) -> set[int]:
    """The ports a service listens on, as its ``ports`` and ``expose`` entries say."""
    spec = compose_services()[service]
    exposed = {int(str(entry).split("/")[0]) for entry in spec.get("expose") or []}
    return exposed | {port.container_port for port in ports_of(spec)}


def published_ports(service: str) -> list[int]:
    """The host ports a service publishes (one Docker picks is left out)."""
    return [int(port.host_port) for port in ports_of(compose_services()[service]) if port.host_port]


def healthcheck_text(service: str) -> str:
    test = (compose_services()[service].get("healthcheck") or {}).get("test", [])
    return " ".join(test) if isinstance(test, list) else str(test)


def argv_of(spec: Mapping[str, Any], key: str) -> list[str]:
    """A service's ``command`` or ``entrypoint`` as a list of arguments."""
    raw = spec.get(key)
    if raw is None:
        return []
    return shlex.split(raw) if isinstance(raw, str) else [str(arg) for arg in raw]


@dataclass(frozen=True)
class Port:
    """One ``ports`` entry: where the host listens and what it forwards to."""

    host_ip: str | None  # None: every interface
    host_port: str | None  # None: Docker picks one
    container_port: int


def ports_of(spec: Mapping[str, Any]) -> list[Port]:
    """A service's published ports, short (``[IP:][HOST:]CONTAINER[/PROTO]``) or long form."""
    ports: list[Port] = []
    for entry in spec.get("ports") or []:
        if isinstance(entry, dict):
            published = entry.get("published")
            ports.append(
                Port(
                    host_ip=entry.get("host_ip"),
                    host_port=None if published is None else str(published),
                    container_port=int(str(entry["target"]).split("-")[0]),
                )
            )
            continue
        text = str(entry).split("/")[0]
        host_ip: str | None = None
        if text.startswith("["):  # an IPv6 address
            host_ip, _, text = text[1:].partition("]:")
        parts = text.split(":")
        if len(parts) == 3:
            host_ip, parts = parts[0], parts[1:]
        host_port = parts[0] if len(parts) == 2 and parts[0] else None
        ports.append(Port(host_ip, host_port, int(parts[-1].split("-")[0])))
    return ports


@dataclass(frozen=True)
class Mount:
    """One ``volumes`` entry of a service."""

    source: str | None  # a volume name or a host path; None for an anonymous volume
    target: str
    read_only: bool
    named: bool  # a named volume (not a host path, not anonymous)


def mounts_of(spec: Mapping[str, Any]) -> list[Mount]:
    """A service's mounts, short (``SOURCE:TARGET[:OPTIONS]``) or long form. A source that is a
    path or an interpolation (``${...}``) counts as a bind mount."""
    mounts: list[Mount] = []
    for entry in spec.get("volumes") or []:
        if isinstance(entry, dict):
            source = entry.get("source")
            kind = entry.get("type", "volume")
            read_only = bool(entry.get("read_only", False))
            mounts.append(
                Mount(source, entry["target"], read_only, kind == "volume" and bool(source))
            )
            continue
        parts = str(entry).split(":")
        if len(parts) == 1:
            mounts.append(Mount(None, parts[0], False, False))
            continue
        source, target = parts[0], parts[1]
        options = parts[2].split(",") if len(parts) > 2 else []
        named = not source.startswith((".", "/", "~", "$"))
        mounts.append(Mount(source, target, "ro" in options, named))
    return mounts


def mount_holding(spec: Mapping[str, Any], path: str) -> Mount | None:
    """The mount a path inside the container lies in (the deepest one), if any."""
    holding = [
        mount
        for mount in mounts_of(spec)
        if path == mount.target or path.startswith(mount.target.rstrip("/") + "/")
    ]
    return max(holding, key=lambda mount: len(mount.target), default=None)


def port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def image_is_pinned(image: str) -> bool:
    """``name:tag`` where the tag names a version (at least major.minor), never ``latest``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return False
    tag = last.rsplit(":", 1)[1]
    return tag != "latest" and re.search(r"\d+\.\d+", tag) is not None


def dockerfile_instructions(path: Path) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            logical += stripped[:-1] + " "
            continue
        logical += stripped
        keyword, _, rest = logical.partition(" ")
        yield keyword.upper(), rest.strip()
        logical = ""


def base_images(path: Path) -> list[str]:
    """Images a Dockerfile pulls: FROM and COPY --from=<image>, minus its own stage names."""
    stages: set[str] = set()
    images: list[str] = []
    for keyword, args in dockerfile_instructions(path):
        if keyword == "FROM":
            words = [word for word in args.split() if not word.startswith("--")]
            if words[0] not in stages:
                images.append(words[0])
            if len(words) == 3 and words[1].lower() == "as":
                stages.add(words[2])
        elif keyword == "COPY":
            for word in args.split():
                if word.startswith("--from="):
                    source = word.removeprefix("--from=")
                    if source not in stages and not source.isdigit():
                        images.append(source)
    return images


def compose_dockerfiles() -> dict[str, Path]:
    """Service name -> the Dockerfile its ``build:`` uses."""
    found: dict[str, Path] = {}
    for name, spec in compose_services().items():
        build = spec.get("build")
        if build is None:
            continue
        if isinstance(build, str):
            context, dockerfile = build, "Dockerfile"
        else:
            context, dockerfile = build.get("context", "."), build.get("dockerfile", "Dockerfile")
        found[name] = (ROOT / context / dockerfile).resolve()
    return found


def elasticmq_queues(text: str) -> set[str]:
    """The queue names in the ``queues { ... }`` block of an ElasticMQ (HOCON) config."""
    body = "\n".join(re.sub(r"(^|\s)(#|//).*$", "", line) for line in text.splitlines())
    start = re.search(r"^queues\s*\{", body, re.MULTILINE)
    assert start, "no queues block"
    names: set[str] = set()
    depth = 1
    for match in re.finditer(r'"([^"]+)"\s*\{|([A-Za-z0-9_.-]+)\s*\{|\{|\}', body[start.end() :]):
        if match.group(0) == "}":
            depth -= 1
            if depth == 0:
                break
            continue
        name = match.group(1) or match.group(2)
        if name and depth == 1:
            names.add(name)
        depth += 1
    return names


def grafana_dashboard(name: str = "ai-orchestrator") -> dict[str, Any]:
    """A provisioned dashboard, by its file's name (the metrics one by default)."""
    data = json.loads((GRAFANA_DIR / "dashboards" / f"{name}.json").read_text("utf-8"))
    assert isinstance(data, dict)
    return data


def grafana_dashboards() -> list[dict[str, Any]]:
    """Every dashboard Grafana's provider loads."""
    return [
        grafana_dashboard(path.stem) for path in sorted((GRAFANA_DIR / "dashboards").glob("*.json"))
    ]


def dashboard_exprs() -> dict[str, list[str]]:
    """Panel title -> its query expressions."""
    return {
        panel["title"]: [target["expr"] for target in panel.get("targets", [])]
        for panel in grafana_dashboard()["panels"]
    }
