"""The Docker stack, checked without Docker: docker-compose.yml, the Dockerfiles, the collector,
Prometheus, Grafana and ElasticMQ configs must agree with each other and with the worker's
configuration (`aiorch.runtime.config.Settings`), and the stack must meet its hardening policy
(loopback binds, no default credentials, encryption on; issue 14, security review H4). Every
check reads files only; no engine is used. The two shell scripts that handle the stack's secrets
are also run here, with `sh` on temporary directories standing in for the volumes.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from aiorch.ops.inbox.auth import TokenBook
from aiorch.ops.signing import SigningKey
from aiorch.runtime.codec import KeyRing
from aiorch.runtime.config import SECRET_FILE_FIELDS, Settings
from workflows import contract
from workflows.identity import parse_review_keys

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

WORKER = "worker"

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
NOT_WIRED = {"S3_ENDPOINT_URL": "no S3 stand-in in the stack; s3:// inputs go to AWS"}
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
}


# ----------------------------------------------------------------------------- loading


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@functools.cache
def _compose() -> dict[str, Any]:
    data = _load_yaml(COMPOSE_FILE)
    assert isinstance(data, dict), f"{COMPOSE_FILE.name} is not a mapping"
    return data


def _services() -> dict[str, dict[str, Any]]:
    services = _compose()["services"]
    assert isinstance(services, dict)
    return services


@functools.cache
def _otel() -> dict[str, Any]:
    data = _load_yaml(OTEL_FILE)
    assert isinstance(data, dict)
    return data


@functools.cache
def _prometheus() -> dict[str, Any]:
    data = _load_yaml(PROMETHEUS_FILE)
    assert isinstance(data, dict)
    return data


def _env_of(spec: Mapping[str, Any]) -> dict[str, str | None]:
    """A service's environment, whichever of the two compose forms it uses; None marks a
    variable passed through from the shell that runs compose (``NAME`` without a value)."""
    raw = spec.get("environment") or {}
    if isinstance(raw, list):
        pairs = (str(item).partition("=") for item in raw)
        return {key: value if sep else None for key, sep, value in pairs}
    return {str(key): None if value is None else str(value) for key, value in raw.items()}


def _environment(service: str) -> dict[str, str]:
    """A service's environment as a dict of strings (a pass-through variable reads as "")."""
    return {key: value or "" for key, value in _env_of(_services()[service]).items()}


def _depends_on(service: str) -> dict[str, str]:
    """A service's dependencies, name -> condition (the short list form means started)."""
    raw = _services()[service].get("depends_on") or {}
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in raw.items()}


def _one_shot_services() -> set[str]:
    """Services some other service waits on to finish: setup jobs, not servers."""
    return {
        target
        for name in _services()
        for target, condition in _depends_on(name).items()
        if condition == "service_completed_successfully"
    }


def _container_ports(service: str) -> set[int]:
    """The ports a service listens on, as its ``ports`` and ``expose`` entries say."""
    spec = _services()[service]
    exposed = {int(str(entry).split("/")[0]) for entry in spec.get("expose") or []}
    return exposed | {port.container_port for port in _ports_of(spec)}


def _published_ports(service: str) -> list[int]:
    """The host ports a service publishes (one Docker picks is left out)."""
    return [int(port.host_port) for port in _ports_of(_services()[service]) if port.host_port]


def _healthcheck_text(service: str) -> str:
    test = (_services()[service].get("healthcheck") or {}).get("test", [])
    return " ".join(test) if isinstance(test, list) else str(test)


def _argv(spec: Mapping[str, Any], key: str) -> list[str]:
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


def _ports_of(spec: Mapping[str, Any]) -> list[Port]:
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


def _mounts_of(spec: Mapping[str, Any]) -> list[Mount]:
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


def _mount_holding(spec: Mapping[str, Any], path: str) -> Mount | None:
    """The mount a path inside the container lies in (the deepest one), if any."""
    holding = [
        mount
        for mount in _mounts_of(spec)
        if path == mount.target or path.startswith(mount.target.rstrip("/") + "/")
    ]
    return max(holding, key=lambda mount: len(mount.target), default=None)


def _port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def _image_is_pinned(image: str) -> bool:
    """``name:tag`` where the tag names a version (at least major.minor), never ``latest``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return False
    tag = last.rsplit(":", 1)[1]
    return tag != "latest" and re.search(r"\d+\.\d+", tag) is not None


def _dockerfile_instructions(path: Path) -> Iterator[tuple[str, str]]:
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


def _base_images(path: Path) -> list[str]:
    """Images a Dockerfile pulls: FROM and COPY --from=<image>, minus its own stage names."""
    stages: set[str] = set()
    images: list[str] = []
    for keyword, args in _dockerfile_instructions(path):
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


def _compose_dockerfiles() -> dict[str, Path]:
    """Service name -> the Dockerfile its ``build:`` uses."""
    found: dict[str, Path] = {}
    for name, spec in _services().items():
        build = spec.get("build")
        if build is None:
            continue
        if isinstance(build, str):
            context, dockerfile = build, "Dockerfile"
        else:
            context, dockerfile = build.get("context", "."), build.get("dockerfile", "Dockerfile")
        found[name] = (ROOT / context / dockerfile).resolve()
    return found


def _elasticmq_queues(text: str) -> set[str]:
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


def _dashboard() -> dict[str, Any]:
    data = json.loads((GRAFANA_DIR / "dashboards" / "ai-orchestrator.json").read_text("utf-8"))
    assert isinstance(data, dict)
    return data


def _dashboard_exprs() -> dict[str, list[str]]:
    """Panel title -> its query expressions."""
    return {
        panel["title"]: [target["expr"] for target in panel.get("targets", [])]
        for panel in _dashboard()["panels"]
    }


# ----------------------------------------------------------------------------- files


def test_yaml_files_parse() -> None:
    """Every YAML file of the stack parses to a mapping."""
    paths = [
        COMPOSE_FILE,
        OTEL_FILE,
        PROMETHEUS_FILE,
        *sorted((GRAFANA_DIR / "provisioning").rglob("*.yml")),
    ]
    for path in paths:
        assert isinstance(_load_yaml(path), dict), f"{path.relative_to(ROOT)} is not a mapping"


def test_compose_bind_mounts_and_scripts_exist() -> None:
    """Every file or directory compose mounts from the repo exists, and so does every script a
    service runs from a mounted directory."""
    for name, spec in _services().items():
        mounts: dict[str, Path] = {}
        for volume in spec.get("volumes") or []:
            source, target = str(volume).split(":")[:2]
            if source.startswith("."):
                host = ROOT / source
                assert host.exists(), f"{name}: mounts missing {source}"
                mounts[target] = host
        for arg in _argv(spec, "entrypoint") + _argv(spec, "command"):
            for target, host in mounts.items():
                if arg.startswith(target + "/"):
                    script = host / arg.removeprefix(target + "/")
                    assert script.is_file(), f"{name}: runs missing {arg}"


# ----------------------------------------------------------------------------- images


def test_every_service_uses_a_pinned_image_or_a_build() -> None:
    """Each service names an image with an explicit version tag (never ``latest``, never
    untagged) or builds one from the repo."""
    problems = []
    for name, spec in _services().items():
        if "build" in spec and "image" not in spec:
            continue
        image = spec.get("image")
        if not image or not _image_is_pinned(str(image)):
            problems.append(f"{name}: {image!r}")
    assert not problems, "unpinned images: " + ", ".join(problems)


def test_built_images_pin_their_base_images() -> None:
    """Every Dockerfile compose builds exists and pulls only version-pinned images."""
    dockerfiles = _compose_dockerfiles()
    assert dockerfiles, "no service is built from the repo"
    for name, path in dockerfiles.items():
        assert path.is_file(), f"{name}: no Dockerfile at {path}"
        images = _base_images(path)
        assert images, f"{path.relative_to(ROOT)} has no FROM"
        unpinned = [image for image in images if not _image_is_pinned(image)]
        assert not unpinned, f"{path.relative_to(ROOT)} pulls unpinned {unpinned}"


def test_app_image_is_slim_python_runs_the_worker_as_non_root() -> None:
    """The project image is python:3.11 slim, installs the hash-locked runtime set (never a
    dev extra or the dev lock) and then the project without resolving anything, ends as a
    non-root user and runs ``python worker.py`` by default."""
    instructions = list(_dockerfile_instructions(APP_DOCKERFILE))
    froms = [args.split()[0] for keyword, args in instructions if keyword == "FROM"]
    assert froms, "no FROM"
    assert all(re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", image) for image in froms), froms

    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    users = [args for keyword, args in instructions[last_from:] if keyword == "USER"]
    assert users, "the final stage never switches away from root"
    assert users[-1].split(":")[0] not in {"root", "0"}, users[-1]

    runs = " ".join(args for keyword, args in instructions if keyword == "RUN")
    installs = re.findall(r"pip install ([^&]+)", runs)
    assert "--require-hashes -r requirements/runtime.txt" in " ".join(installs), installs
    for command in installs:
        assert "--require-hashes" in command or "--no-deps" in command, command
        assert "[" not in command and "requirements/dev.txt" not in command, command
    assert re.search(r"pip wheel --no-deps --no-build-isolation .*\.(\s|$)", runs), runs

    cmd = [args for keyword, args in instructions if keyword == "CMD"]
    assert cmd and json.loads(cmd[-1]) == ["python", "worker.py"], cmd


def test_dockerignore_keeps_build_inputs_and_drops_local_state() -> None:
    """What the Dockerfile copies from the context is not ignored, and the venv, git data
    and local state never enter the build context."""
    patterns = [
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        return any(fnmatch.fnmatch(path, pattern) for pattern in patterns)

    for keyword, args in _dockerfile_instructions(APP_DOCKERFILE):
        if keyword != "COPY" or "--from=" in args:
            continue
        sources = [word for word in args.split() if not word.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY of missing {source}"
            assert not ignored(source.rstrip("/")), f"{source} is copied but ignored"
    for local in (".venv", ".venv-3.12", ".git", ".data", "tests"):
        assert ignored(local), f"{local} would be sent to the build"


# ----------------------------------------------------------------------------- worker env


def test_contract_variables_are_settings_fields() -> None:
    """Each variable the contract wires is a field of Settings, so renaming one in the config
    breaks this test instead of silently unwiring the stack."""
    fields = {name.upper() for name in Settings.model_fields}
    missing = [name for name in CONTRACT_VARIABLES if name not in fields]
    assert not missing, f"not Settings fields: {missing}"
    assert set(NOT_WIRED) <= fields, "NOT_WIRED names a variable Settings no longer has"


def test_worker_sets_every_address_and_name_setting() -> None:
    """The worker service sets every contract variable and every Settings field that names an
    address or a resource, except the few left unset on purpose. A secret (REVIEWER_KEY, the
    CLI's signing key) is not an address, whatever its name ends with."""
    derived = {
        name.upper()
        for name in Settings.model_fields
        if name.endswith(ADDRESS_OR_NAME_SUFFIXES) and name not in SECRET_FILE_FIELDS
    }
    required = (derived | set(CONTRACT_VARIABLES)) - set(NOT_WIRED)
    environment = _environment(WORKER)
    missing = sorted(name for name in required if not environment.get(name))
    assert not missing, f"worker environment lacks {missing}"


def test_worker_environment_names_only_known_variables() -> None:
    """Every variable set on the worker is read by Settings or by a library (a typo would
    otherwise be ignored silently, since Settings ignores unknown variables)."""
    fields = {name.upper() for name in Settings.model_fields}
    unknown = sorted(
        name
        for name in _environment(WORKER)
        if name not in fields | EXTERNAL_VARIABLES | PENDING_SETTINGS
    )
    assert not unknown, f"nothing reads {unknown}"


def test_metrics_port_is_a_setting() -> None:
    """METRICS_PORT, which compose sets and Prometheus scrapes, is read by Settings."""
    assert "metrics_port" in Settings.model_fields


def test_worker_addresses_reach_the_services_that_serve_them() -> None:
    """Each address the worker is given names a compose service and the port that service
    listens on according to its own config."""
    env = _environment(WORKER)
    services = _services()

    host, port = env["TEMPORAL_ADDRESS"].rsplit(":", 1)
    assert host == "temporal" and int(port) in _container_ports("temporal")

    llm = urlsplit(env["OPENAI_BASE_URL"])
    command = [str(arg) for arg in services["llm-simulator"]["command"]]
    assert llm.hostname == "llm-simulator"
    assert llm.port == int(command[command.index("--port") + 1])
    assert llm.path.rstrip("/") == "/v1"

    sqs = urlsplit(env["SQS_ENDPOINT_URL"])
    bind_port = re.search(r"bind-port\s*=\s*(\d+)", ELASTICMQ_FILE.read_text(encoding="utf-8"))
    assert bind_port
    assert sqs.hostname == "elasticmq" and sqs.port == int(bind_port.group(1))

    vectors = urlsplit(env["VECTOR_STORE_URL"])
    assert vectors.hostname == "qdrant" and vectors.port in _container_ports("qdrant")

    otlp = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    grpc = _otel()["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert otlp.hostname == "otel-collector" and otlp.port == _port_of(grpc)


def test_worker_names_match_the_contract_and_the_setup_job() -> None:
    """The worker polls the contract's task queue in the namespace the setup job creates."""
    env = _environment(WORKER)
    assert env["TEMPORAL_TASK_QUEUE"] == contract.DEFAULT_TASK_QUEUE
    assert env["TEMPORAL_NAMESPACE"] == _environment("temporal-namespace")["NAMESPACE"]
    assert env["TEMPORAL_NAMESPACE"] == _environment("temporal-ui")["TEMPORAL_DEFAULT_NAMESPACE"]


# ----------------------------------------------------------------------------- ordering


def test_depends_on_targets_exist_and_can_meet_their_condition() -> None:
    """Every depends_on target is a service; a ``service_healthy`` target has a health check
    and a ``service_completed_successfully`` target is a job that is not restarted forever."""
    services = _services()
    for name in services:
        for target, condition in _depends_on(name).items():
            assert target in services, f"{name} depends on unknown {target}"
            spec = services[target]
            if condition == "service_healthy":
                assert _healthcheck_text(target), f"{name} waits for {target} to be healthy"
                assert not spec["healthcheck"].get("disable"), target
            elif condition == "service_completed_successfully":
                assert spec.get("restart") not in {"always", "unless-stopped"}, target
            else:
                assert condition == "service_started", f"{name}: unknown condition {condition}"


def test_long_running_services_have_health_checks() -> None:
    """Every service except the one-shot setup jobs declares a health check."""
    missing = sorted(
        name
        for name in _services()
        if name not in _one_shot_services() and not _healthcheck_text(name)
    )
    assert not missing, f"no health check: {missing}"


def test_worker_starts_after_temporal_sqs_qdrant_llm_and_collector() -> None:
    """The worker waits for Temporal and its namespace, the SQS endpoint, Qdrant, the LLM
    simulator and the collector, each with the condition that proves it ready."""
    depends = _depends_on(WORKER)
    for target, condition in WORKER_DEPENDENCIES.items():
        assert depends.get(target) == condition, f"worker -> {target}: {depends.get(target)}"


def test_published_host_ports_do_not_collide() -> None:
    """No two services publish the same host port, and the worker publishes none (so it can
    be scaled)."""
    seen: dict[int, str] = {}
    for name in _services():
        for port in _published_ports(name):
            assert port not in seen, f"host port {port}: {seen[port]} and {name}"
            seen[port] = name
    assert not _published_ports(WORKER)
    assert _published_ports("temporal-ui") == [8233]
    assert _container_ports("temporal-ui") == {8080}


def test_named_volumes_keep_postgres_and_qdrant_data() -> None:
    """PostgreSQL's and Qdrant's data live in declared named volumes."""
    declared = set(_compose().get("volumes") or {})
    for service, path in (("postgres", "/var/lib/postgresql/data"), ("qdrant", "/qdrant/storage")):
        sources = [
            str(volume).split(":")[0]
            for volume in _services()[service].get("volumes") or []
            if str(volume).split(":")[1] == path
        ]
        assert sources and sources[0] in declared, f"{service}: {path} is not a named volume"


# ----------------------------------------------------------------------------- hardening
#
# The policy as checkers: each takes a whole compose document and returns its problems (never a
# secret's value), so the tests below run them on the stack and, to prove they can fail, on
# documents that break each rule.

LOOPBACK = "127.0.0.1"
# What the stack publishes on the host, by service and container port, and why a person or a
# host tool must reach it there. Every other service stays on the internal network.
PUBLISHED = {
    ("temporal", 7233): "the temporal CLI on the host (payloads through the codec server)",
    ("temporal-ui", 8080): "the Web UI, in a browser",
    ("codec-server", 8702): "the browser running the Web UI calls it to decode payloads",
    ("inbox", 8703): "reviewers open the review inbox in a browser",
    ("grafana", 3000): "dashboards, metrics and traces, behind Grafana's login",
}
# Published ports bound beyond loopback, each with the reason docs/docker.md gives. None.
NOT_LOOPBACK: dict[tuple[str, int], str] = {}
# Literal values of secret-looking variables that guard nothing, and why.
PLACEHOLDERS = {
    ("worker", "OPENAI_API_KEY"): ("sim-local-key", "the LLM simulator checks no key"),
    ("worker", "AWS_SECRET_ACCESS_KEY"): ("local", "ElasticMQ checks no request signature"),
}
_SECRET_WORDS = {"PASSWORD", "PASSWD", "PWD", "SECRET", "TOKEN", "CREDENTIAL", "CREDENTIALS"}
# A value the user must supply: ${NAME}, ${NAME?why} or ${NAME:?why}, never with a default.
_REQUIRED_FROM_USER = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(:?\?[^}]*)?\}")
_TRUE = {"true", "1", "yes", "on"}


def _is_secret_name(name: str) -> bool:
    """PASSWORD, TOKEN, SECRET... in a variable's name, or a name ending in KEY/KEYS (but not
    KEY_ID); the ``_FILE``/``__FILE`` form names the same secret."""
    words = re.sub(r"_{1,2}FILE$", "", name.upper().replace("-", "_")).split("_")
    return bool(_SECRET_WORDS & set(words)) or words[-1] in {"KEY", "KEYS"}


def _image_name(spec: Mapping[str, Any]) -> str:
    return str(spec.get("image", "")).split("@")[0].rsplit(":", 1)[0]


def _secret_mount(spec: Mapping[str, Any], path: str | None) -> Mount | None:
    """The read-only named volume a secret file lies in; None for anything else."""
    mount = None if path is None else _mount_holding(spec, path)
    return mount if mount is not None and mount.named and mount.read_only else None


def _wrapped_files(spec: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """What the entrypoint's with-secrets.sh sets: NAME -> (file, appended to the value)."""
    argv = _argv(spec, "entrypoint")
    starts = [i for i, arg in enumerate(argv) if arg.endswith("/" + WRAPPER_SCRIPT.name)]
    found: dict[str, tuple[str, bool]] = {}
    for arg in argv[starts[0] + 1 :] if starts else []:
        if arg == "--":
            break
        match = re.fullmatch(r"([A-Za-z_]\w*)(\+?)=(.*)", arg)
        if match:
            found[match[1]] = (match[3], bool(match[2]))
    return found


def _secret_files(spec: Mapping[str, Any]) -> list[str]:
    """The secret files a service reads: its secret ``*_FILE`` variables and wrapped files."""
    files = [
        value
        for name, value in _env_of(spec).items()
        if value and re.search(r"_FILE$", name) and _is_secret_name(name)
    ]
    return files + [file for file, _ in _wrapped_files(spec).values()]


def _waits_for(services: Mapping[str, Any], name: str) -> dict[str, str]:
    """Every service ``name`` waits for, directly or through others: target -> condition."""
    seen: dict[str, str] = {}
    todo = [name]
    while todo:
        raw = services[todo.pop()].get("depends_on") or {}
        targets = (
            dict.fromkeys(raw, "service_started")
            if isinstance(raw, list)
            else {target: spec.get("condition", "service_started") for target, spec in raw.items()}
        )
        for target, condition in targets.items():
            if target not in seen and target in services:
                seen[target] = condition
                todo.append(target)
    return seen


def _secrets_job(services: Mapping[str, Any]) -> str | None:
    """The one-shot service that runs secrets.sh, if there is exactly one."""
    jobs = [
        name
        for name, spec in services.items()
        if any(arg.endswith("/" + SECRETS_SCRIPT.name) for arg in _argv(spec, "entrypoint"))
    ]
    return jobs[0] if len(jobs) == 1 else None


def exposure_problems(compose: Mapping[str, Any]) -> list[str]:
    """Ports: published only where PUBLISHED says, bound to loopback unless NOT_LOOPBACK says
    why not, and no service on the host's network."""
    problems = []
    for name, spec in compose["services"].items():
        if spec.get("network_mode") == "host":
            problems.append(f"{name}: network_mode host exposes every port it listens on")
        for port in _ports_of(spec):
            key = (name, port.container_port)
            if key not in PUBLISHED:
                problems.append(
                    f"{name}: publishes {port.container_port}, which no host user needs"
                )
            if port.host_ip != LOOPBACK and key not in NOT_LOOPBACK:
                where = port.host_ip or "every interface"
                problems.append(
                    f"{name}: {port.container_port} is bound to {where}, not {LOOPBACK}"
                )
    return problems


def secret_problems(compose: Mapping[str, Any]) -> list[str]:
    """No literal secret: a secret-named variable (or build argument, which would stay in the
    image) is unset (passed from the shell), required from the user without a default, or a
    ``*_FILE`` in a read-only named volume; a secret-named ``NAME=VALUE`` argument names such a
    file; PLACEHOLDERS are the only exceptions."""
    problems = []
    for name, spec in compose["services"].items():
        build = spec.get("build")
        build_args = _env_of({"environment": build.get("args")}) if isinstance(build, dict) else {}
        for variable, value in {**_env_of(spec), **build_args}.items():
            if value is None or not _is_secret_name(variable):
                continue
            if re.search(r"_FILE$", variable):
                if _secret_mount(spec, value) is None:
                    problems.append(f"{name}: {variable} is not a file in a read-only named volume")
            elif not _REQUIRED_FROM_USER.fullmatch(value):
                placeholder = PLACEHOLDERS.get((name, variable))
                if placeholder is None or placeholder[0] != value:
                    problems.append(f"{name}: {variable} is set to a literal value")
        for arg in _argv(spec, "entrypoint") + _argv(spec, "command"):
            match = re.fullmatch(r"-{0,2}([A-Za-z_][\w-]*)\+?=(.*)", arg)
            if match and _is_secret_name(match[1]) and _secret_mount(spec, match[2]) is None:
                problems.append(f"{name}: argument {match[1]}= holds a literal secret")
    return problems


def grafana_problems(compose: Mapping[str, Any]) -> list[str]:
    """Grafana: anonymous access explicitly off, no proxy auth or sign-up, and an admin password
    of its own (a file in a named volume, or required from the user), never admin/admin."""
    problems = []
    for name, spec in compose["services"].items():
        if not _image_name(spec).startswith("grafana/grafana"):
            continue
        env = _env_of(spec)
        if (env.get("GF_AUTH_ANONYMOUS_ENABLED") or "").lower() != "false":
            problems.append(
                f'{name}: anonymous access is not off (GF_AUTH_ANONYMOUS_ENABLED: "false")'
            )
        for variable in ("GF_AUTH_PROXY_ENABLED", "GF_USERS_ALLOW_SIGN_UP"):
            if (env.get(variable) or "").lower() in _TRUE:
                problems.append(f"{name}: {variable} lets someone in without the admin's say")
        password = env.get("GF_SECURITY_ADMIN_PASSWORD")
        password_file = env.get("GF_SECURITY_ADMIN_PASSWORD__FILE")
        if password is not None and not _REQUIRED_FROM_USER.fullmatch(password):
            problems.append(f"{name}: the admin password is a literal (or has a default)")
        elif password is None and _secret_mount(spec, password_file) is None:
            problems.append(f"{name}: no admin password of its own; Grafana would use admin/admin")
    return problems


def _key_source(spec: Mapping[str, Any], secret: str) -> str | None:
    """Where a service's secret comes from: its volume, or the variable required from the
    user; None when it has none."""
    env = _env_of(spec)
    mount = _secret_mount(spec, env.get(f"{secret}_FILE"))
    if mount is not None:
        return f"volume {mount.source}"
    value = env.get(secret)
    return value if value and _REQUIRED_FROM_USER.fullmatch(value) else None


def encryption_problems(compose: Mapping[str, Any]) -> list[str]:
    """Encryption on: the worker has payload keys and REQUIRE_ENCRYPTION; a codec server reads
    the same keys and a token; the Web UI's codec endpoint is that server's published port with
    the token appended from the same secret."""
    services = compose["services"]
    problems = []
    worker = services.get(WORKER, {})
    keys = _key_source(worker, "PAYLOAD_KEYS")
    if keys is None:
        problems.append("worker: no PAYLOAD_KEYS_FILE in a read-only named volume: plain text")
    if (_env_of(worker).get("REQUIRE_ENCRYPTION") or "").lower() not in _TRUE:
        problems.append("worker: REQUIRE_ENCRYPTION is not true: plaintext payloads pass")
    codecs = {
        name: spec
        for name, spec in services.items()
        if "aiorch.ops.codec_server" in _argv(spec, "command")
    }
    if not codecs:
        problems.append(
            "no codec server (python -m aiorch.ops.codec_server): the UI shows ciphertext"
        )
    tokens: set[str | None] = set()
    codec_ports: set[str | None] = set()
    for name, spec in codecs.items():
        if _key_source(spec, "PAYLOAD_KEYS") != keys:
            problems.append(f"{name}: does not read the worker's payload keys")
        token = _key_source(spec, "CODEC_SERVER_TOKEN")
        if token is None:
            problems.append(f"{name}: no CODEC_SERVER_TOKEN_FILE in a read-only named volume")
        tokens.add(token)
        codec_ports |= {port.host_port for port in _ports_of(spec)}
    uis = {name: spec for name, spec in services.items() if _image_name(spec) == "temporalio/ui"}
    for name, spec in uis.items():
        endpoint = urlsplit(_env_of(spec).get("TEMPORAL_CODEC_ENDPOINT") or "")
        if (
            endpoint.hostname not in {"localhost", LOOPBACK}
            or str(endpoint.port) not in codec_ports
        ):
            problems.append(f"{name}: TEMPORAL_CODEC_ENDPOINT is not the codec server's port")
        if not endpoint.path.endswith("/"):
            problems.append(f"{name}: TEMPORAL_CODEC_ENDPOINT must end in / (the token follows)")
        file, appended = _wrapped_files(spec).get("TEMPORAL_CODEC_ENDPOINT", ("", False))
        mount = _secret_mount(spec, file)
        if not appended or mount is None or f"volume {mount.source}" not in tokens:
            problems.append(f"{name}: its codec endpoint does not carry the codec server's token")
    return problems


def generator_problems(compose: Mapping[str, Any]) -> list[str]:
    """The secrets job: writes only into declared named volumes (every bind mount read-only,
    every directory secrets.sh writes is such a volume), has no network and no port; every
    secret file another service reads lies in one of those volumes, mounted read-only, and its
    reader waits for the job to finish."""
    services = compose["services"]
    job = _secrets_job(services)
    if job is None:
        return [f"not exactly one service runs {SECRETS_SCRIPT.name}"]
    spec = services[job]
    problems = []
    declared = set(compose.get("volumes") or {})
    written = {m.target: m.source for m in _mounts_of(spec) if m.named and not m.read_only}
    for mount in _mounts_of(spec):
        if not mount.read_only and not mount.named:
            where = mount.source or "an anonymous volume"
            problems.append(f"{job}: can write to {where} at {mount.target}, not a named volume")
        if mount.named and mount.source not in declared:
            problems.append(f"{job}: volume {mount.source} is not declared")
    if spec.get("network_mode") != "none" or _ports_of(spec):
        problems.append(f"{job}: has a network; generating secrets needs none")
    root = _env_of(spec).get("SECRETS_ROOT") or "/secrets"
    for directory in sorted(set(re.findall(r"\$ROOT/([\w.-]+)/", SECRETS_SCRIPT.read_text()))):
        if f"{root}/{directory}" not in written:
            problems.append(f"{job}: {SECRETS_SCRIPT.name} writes {directory}, not a named volume")
    for name, other in services.items():
        if name == job:
            continue
        for path in _secret_files(other):
            holder = _mount_holding(other, path)
            if holder is None or not holder.named or holder.source not in written.values():
                problems.append(f"{name}: reads {path} from outside the {job} job's volumes")
            elif not holder.read_only:
                problems.append(f"{name}: mounts {holder.source} writable")
            elif _waits_for(services, name).get(job) != "service_completed_successfully":
                problems.append(f"{name}: reads {path} without waiting for the {job} job")
    return problems


CHECKERS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "exposure": exposure_problems,
    "secrets": secret_problems,
    "grafana": grafana_problems,
    "encryption": encryption_problems,
    "generator": generator_problems,
}


def test_only_needed_ports_are_published_and_only_on_loopback() -> None:
    """Every published port is bound to 127.0.0.1; only the services in PUBLISHED publish one
    (each of them does), and none shares the host's network."""
    assert exposure_problems(_compose()) == []
    published = {
        (name, port.container_port) for name in _services() for port in _ports_of(_services()[name])
    }
    assert published == set(PUBLISHED)


def test_no_service_sets_a_literal_secret() -> None:
    """No password, token or key is written into docker-compose.yml; the placeholders allowed
    instead are exactly the values the stack sets."""
    assert secret_problems(_compose()) == []
    for (service, variable), (value, _reason) in PLACEHOLDERS.items():
        assert _environment(service)[variable] == value, f"stale placeholder {service} {variable}"


def test_grafana_needs_a_login_with_a_generated_password() -> None:
    """Grafana has no anonymous access or sign-up, and its admin password is the generated one."""
    assert grafana_problems(_compose()) == []
    mount = _secret_mount(
        _services()["grafana"], _environment("grafana")["GF_SECURITY_ADMIN_PASSWORD__FILE"]
    )
    assert mount is not None and mount.source == "grafana-admin-password"


def test_payloads_are_encrypted_and_the_ui_decodes_through_the_codec_server() -> None:
    """The worker encrypts with the generated key ring and refuses plaintext; the codec server
    reads the same ring and the token; the UI's codec endpoint is the codec server's published
    port plus that token, the codec server admits the UI's origin for CORS, and it listens
    where it is published and probed."""
    assert encryption_problems(_compose()) == []
    ui_port = _published_ports("temporal-ui")[0]
    origin = f"http://localhost:{ui_port}"
    assert _environment("codec-server")["TEMPORAL_UI_URL"] == origin
    assert _environment(WORKER)["TEMPORAL_UI_URL"] == origin
    assert (
        _environment("codec-server")["TEMPORAL_NAMESPACE"]
        == _environment(WORKER)["TEMPORAL_NAMESPACE"]
    )
    codec_port = int(_environment("codec-server")["CODEC_SERVER_PORT"])
    assert codec_port in _container_ports("codec-server")
    assert f"'127.0.0.1', {codec_port}" in _healthcheck_text("codec-server")


def test_the_inbox_signs_with_a_generated_key_the_worker_trusts() -> None:
    """The inbox reads its signing key and its reviewers' token hashes from the secrets job's
    volumes, and the worker the key's public half, so reviews the inbox signs are accepted and
    unsigned ones are not; the inbox decodes with the worker's key ring, listens where it is
    published and probed, and the worker's notification links point at it."""
    inbox, worker = _environment("inbox"), _environment(WORKER)
    spec = _services()["inbox"]
    mounts = {
        variable: _secret_mount(spec, inbox[variable])
        for variable in ("INBOX_SIGNING_KEY_FILE", "PAYLOAD_KEYS_FILE")
    }
    assert {v: m.source if m else None for v, m in mounts.items()} == {
        "INBOX_SIGNING_KEY_FILE": "inbox-key",
        "PAYLOAD_KEYS_FILE": "payload-keys",
    }
    tokens = _mount_holding(spec, inbox["INBOX_TOKENS_FILE"])
    assert tokens is not None and tokens.source == "inbox-tokens" and tokens.read_only
    public = _secret_mount(_services()[WORKER], worker["REVIEW_PUBLIC_KEYS_FILE"])
    assert public is not None and public.source == "review-public-keys"
    assert _key_source(spec, "PAYLOAD_KEYS") == _key_source(_services()[WORKER], "PAYLOAD_KEYS")
    assert inbox["REQUIRE_ENCRYPTION"] == "true"
    assert inbox["TEMPORAL_NAMESPACE"] == worker["TEMPORAL_NAMESPACE"]
    assert inbox["TEMPORAL_ADDRESS"] == worker["TEMPORAL_ADDRESS"]
    port = int(inbox["INBOX_PORT"])
    assert port in _container_ports("inbox") and f"127.0.0.1:{port}/healthz" in _healthcheck_text(
        "inbox"
    )
    assert (
        inbox["INBOX_URL"]
        == worker["INBOX_URL"]
        == f"http://localhost:{_published_ports('inbox')[0]}"
    )
    assert "inbox-key" not in {m.source for m in _mounts_of(_services()[WORKER])}


def test_secrets_are_generated_into_named_volumes_only() -> None:
    """The secrets job writes only named volumes, has no network, and everything that reads a
    secret reads it read-only from those volumes after the job has finished."""
    assert generator_problems(_compose()) == []


# A small stack that breaks every rule: each checker must find something in it.
BAD_COMPOSE = """
services:
  secrets:
    build: .
    entrypoint: ["sh", "/opt/aiorch/bin/secrets.sh"]
    volumes: ["./deploy/secrets:/opt/aiorch/bin:ro", "./.data/secrets:/secrets"]
  postgres:
    image: postgres:16.10
    environment: {POSTGRES_PASSWORD: temporal}
    ports: ["5432:5432"]
  temporal-ui:
    image: temporalio/ui:2.49.1
    ports: ["8233:8080"]
  grafana:
    image: grafana/grafana:12.2.0
    environment: {GF_AUTH_ANONYMOUS_ENABLED: "true", GF_SECURITY_ADMIN_PASSWORD: admin}
    ports: ["0.0.0.0:3000:3000"]
  worker:
    build: .
    environment: {PAYLOAD_KEYS: "k1:c2VjcmV0"}
"""


@pytest.mark.parametrize("checker", sorted(CHECKERS))
def test_each_checker_catches_a_small_bad_stack(checker: str) -> None:
    """Fed a small document that breaks every rule, each checker reports problems: none of them
    can pass vacuously."""
    assert CHECKERS[checker](yaml.safe_load(BAD_COMPOSE))


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to a compose document: the key at ``services.a.b`` set (None deletes it)."""

    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc["services"]
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value

    return change


def _add_volume(service: str, volume: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["services"][service]["volumes"].append(volume)

    return change


def _replace_volume(service: str, old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        volumes = doc["services"][service]["volumes"]
        volumes[volumes.index(old)] = new

    return change


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for each in changes:
            each(doc)

    return change


# One rule broken at a time in the real stack: the checker that must object, a fragment of its
# objection (so it objects for that reason), and the change.
Change = Callable[[dict[str, Any]], None]
VIOLATIONS: dict[str, tuple[str, str, Change]] = {
    "ui-on-every-interface": (
        "exposure",
        "8080 is bound to every interface",
        _set("temporal-ui.ports", ["8233:8080"]),
    ),
    "port-on-all-addresses": (
        "exposure",
        "3000 is bound to 0.0.0.0",
        _set("grafana.ports", ["0.0.0.0:3000:3000"]),
    ),
    "long-form-without-host-ip": (
        "exposure",
        "3000 is bound to every interface",
        _set("grafana.ports", [{"target": 3000, "published": 3000}]),
    ),
    "random-host-port": (
        "exposure",
        "8702 is bound to every interface",
        _set("codec-server.ports", ["8702"]),
    ),
    "qdrant-published-on-loopback": (
        "exposure",
        "qdrant: publishes 6333",
        _set("qdrant.ports", ["127.0.0.1:6333:6333"]),
    ),
    "simulator-on-host-network": (
        "exposure",
        "llm-simulator: network_mode host",
        _set("llm-simulator.network_mode", "host"),
    ),
    "grafana-anonymous": (
        "grafana",
        "anonymous access",
        _set("grafana.environment.GF_AUTH_ANONYMOUS_ENABLED", "true"),
    ),
    "grafana-anonymous-left-to-defaults": (
        "grafana",
        "anonymous access",
        _set("grafana.environment.GF_AUTH_ANONYMOUS_ENABLED", None),
    ),
    "grafana-sign-up": (
        "grafana",
        "GF_USERS_ALLOW_SIGN_UP",
        _set("grafana.environment.GF_USERS_ALLOW_SIGN_UP", "true"),
    ),
    "grafana-admin-admin": (
        "grafana",
        "admin password is a literal",
        _both(
            _set("grafana.environment.GF_SECURITY_ADMIN_PASSWORD__FILE", None),
            _set("grafana.environment.GF_SECURITY_ADMIN_PASSWORD", "admin"),
        ),
    ),
    "grafana-password-with-default": (
        "grafana",
        "admin password is a literal",
        _both(
            _set("grafana.environment.GF_SECURITY_ADMIN_PASSWORD__FILE", None),
            _set("grafana.environment.GF_SECURITY_ADMIN_PASSWORD", "${GF_PASSWORD:-admin}"),
        ),
    ),
    "grafana-no-password": (
        "grafana",
        "admin/admin",
        _set("grafana.environment.GF_SECURITY_ADMIN_PASSWORD__FILE", None),
    ),
    "postgres-literal-password": (
        "secrets",
        "postgres: POSTGRES_PASSWORD is set to a literal",
        _both(
            _set("postgres.environment.POSTGRES_PASSWORD_FILE", None),
            _set("postgres.environment.POSTGRES_PASSWORD", "temporal"),
        ),
    ),
    "password-with-a-default": (
        "secrets",
        "SQL_PASSWORD is set to a literal",
        _set("temporal-schema.environment.SQL_PASSWORD", "${SQL_PASSWORD:-temporal}"),
    ),
    "secret-build-argument": (
        "secrets",
        "PIP_INDEX_TOKEN is set to a literal",
        _set("worker.build", {"context": ".", "args": {"PIP_INDEX_TOKEN": "t0ken"}}),
    ),
    "real-looking-openai-key": (
        "secrets",
        "OPENAI_API_KEY is set to a literal",
        _set("worker.environment.OPENAI_API_KEY", "sk-live"),
    ),
    "literal-secret-argument": (
        "secrets",
        "argument POSTGRES_PWD= holds a literal",
        _set(
            "temporal.entrypoint",
            ["/bin/sh", "/opt/aiorch/bin/with-secrets.sh", "POSTGRES_PWD=temporal", "--", "x"],
        ),
    ),
    "key-file-in-the-repo": (
        "secrets",
        "PAYLOAD_KEYS_FILE is not a file in a read-only named volume",
        _both(
            _set("worker.environment.PAYLOAD_KEYS_FILE", "/keys/keys"),
            _add_volume(WORKER, "./.data/keys:/keys:ro"),
        ),
    ),
    "worker-without-keys": (
        "encryption",
        "worker: no PAYLOAD_KEYS_FILE",
        _set("worker.environment.PAYLOAD_KEYS_FILE", None),
    ),
    "plaintext-accepted": (
        "encryption",
        "REQUIRE_ENCRYPTION is not true",
        _set("worker.environment.REQUIRE_ENCRYPTION", "false"),
    ),
    "no-codec-server": (
        "encryption",
        "no codec server",
        _set("codec-server.command", ["python", "-c", "pass"]),
    ),
    "codec-server-with-other-keys": (
        "encryption",
        "does not read the worker's payload keys",
        _replace_volume(
            "codec-server",
            "payload-keys:/run/aiorch/payload-keys:ro",
            "other-keys:/run/aiorch/payload-keys:ro",
        ),
    ),
    "ui-without-codec-endpoint": (
        "encryption",
        "TEMPORAL_CODEC_ENDPOINT is not the codec server's port",
        _set("temporal-ui.environment.TEMPORAL_CODEC_ENDPOINT", None),
    ),
    "ui-endpoint-glued-to-the-token": (
        "encryption",
        "must end in /",
        _set("temporal-ui.environment.TEMPORAL_CODEC_ENDPOINT", "http://localhost:8702"),
    ),
    "ui-endpoint-without-token": (
        "encryption",
        "does not carry the codec server's token",
        _set("temporal-ui.entrypoint", None),
    ),
    "generator-writes-the-repo": (
        "generator",
        "can write to ./.data/payload-keys",
        _replace_volume(
            "secrets",
            "payload-keys:/secrets/payload-keys",
            "./.data/payload-keys:/secrets/payload-keys",
        ),
    ),
    "generator-writes-a-throwaway-volume": (
        "generator",
        "can write to an anonymous volume",
        _replace_volume("secrets", "payload-keys:/secrets/payload-keys", "/secrets/payload-keys"),
    ),
    "writable-scripts-mount": (
        "generator",
        "can write to ./deploy/secrets",
        _replace_volume(
            "secrets", "./deploy/secrets:/opt/aiorch/bin:ro", "./deploy/secrets:/opt/aiorch/bin"
        ),
    ),
    "generator-on-the-network": (
        "generator",
        "has a network",
        _set("secrets.network_mode", None),
    ),
    "reader-does-not-wait": (
        "generator",
        "codec-server: reads /run/aiorch/codec-token/token without waiting",
        _set("codec-server.depends_on", None),
    ),
    "reader-mounts-writable": (
        "generator",
        "worker: mounts payload-keys writable",
        _replace_volume(
            WORKER,
            "payload-keys:/run/aiorch/payload-keys:ro",
            "payload-keys:/run/aiorch/payload-keys",
        ),
    ),
}


@pytest.mark.parametrize("violation", sorted(VIOLATIONS))
def test_checkers_catch_each_rule_broken_in_the_stack(violation: str) -> None:
    """The stack with one rule broken fails the checker for that rule, for that reason (the
    unchanged stack passes them all, see above)."""
    checker, reason, change = VIOLATIONS[violation]
    doc = copy.deepcopy(_compose())
    change(doc)
    problems = CHECKERS[checker](doc)
    assert any(reason in problem for problem in problems), f"{checker}: {problems}"


# ----------------------------------------------------------------------------- secret scripts
#
# secrets.sh and with-secrets.sh run with `sh` on temporary directories standing in for the
# volumes, every file owned by this user instead of the images' uids.

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


# ----------------------------------------------------------------------------- collector


def test_collector_pipelines_use_only_defined_components() -> None:
    """Each pipeline names only receivers, processors and exporters defined in the same file,
    and the service enables only defined extensions."""
    otel = _otel()
    service = otel["service"]
    for extension in service.get("extensions", []):
        assert extension in otel.get("extensions", {}), f"undefined extension {extension}"
    assert {"traces", "metrics"} <= set(service["pipelines"])
    for pipeline, spec in service["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in spec.get(kind, []):
                assert component in otel.get(kind, {}), f"{pipeline}: undefined {component}"
        assert spec["receivers"] and spec["exporters"], f"{pipeline} is not connected"
        assert spec["processors"][0] == "memory_limiter", f"{pipeline}: limiter not first"


def test_collector_routes_traces_to_jaeger_and_metrics_to_prometheus() -> None:
    """Traces leave through an otlp exporter to Jaeger's OTLP port without TLS; metrics
    through the prometheus exporter."""
    otel = _otel()
    pipelines = otel["service"]["pipelines"]
    otlp = [name for name in pipelines["traces"]["exporters"] if name.split("/")[0] == "otlp"]
    assert otlp, "traces do not go to an otlp exporter"
    exporter = otel["exporters"][otlp[0]]
    assert exporter["endpoint"].rsplit(":", 1)[0] == "jaeger"
    assert _port_of(exporter["endpoint"]) == 4317
    assert exporter["tls"]["insecure"] is True
    assert "jaeger" in _services()
    assert any(name.split("/")[0] == "prometheus" for name in pipelines["metrics"]["exporters"])


def test_collector_health_check_is_what_compose_probes() -> None:
    """The compose health check probes the health_check extension's port with a binary the
    collector's image actually contains."""
    endpoint = _otel()["extensions"]["health_check"]["endpoint"]
    probe = _healthcheck_text("otel-collector")
    assert f":{_port_of(endpoint)}/" in probe
    binary = probe.split()[1]  # after CMD
    dockerfile = _compose_dockerfiles()["otel-collector"].read_text(encoding="utf-8")
    assert re.search(rf"COPY --from=\S+ \S+ {re.escape(binary)}\s*$", dockerfile, re.MULTILINE)
    config_mount = [
        str(volume)
        for volume in _services()["otel-collector"]["volumes"]
        if str(volume).startswith("./otel-config.yaml:")
    ]
    assert config_mount, "otel-config.yaml is not mounted into the collector"
    target = config_mount[0].split(":")[1]
    assert f"--config={target}" in _services()["otel-collector"]["command"]


# ----------------------------------------------------------------------------- prometheus


def _scrape_jobs() -> dict[str, dict[str, Any]]:
    return {job["job_name"]: job for job in _prometheus()["scrape_configs"]}


def _static_targets(job: Mapping[str, Any]) -> list[str]:
    return [target for group in job.get("static_configs", []) for target in group["targets"]]


def test_prometheus_scrapes_every_worker_at_the_metrics_port() -> None:
    """Workers are found by DNS (every replica) at METRICS_PORT."""
    metrics_port = int(_environment(WORKER)["METRICS_PORT"])
    jobs = [job for job in _scrape_jobs().values() if job.get("dns_sd_configs")]
    worker_sd = [
        sd for job in jobs for sd in job["dns_sd_configs"] if WORKER in sd.get("names", [])
    ]
    assert worker_sd, "Prometheus does not discover the worker"
    assert all(int(sd["port"]) == metrics_port for sd in worker_sd)


def test_worker_health_check_is_its_readiness_probe() -> None:
    """The worker is healthy when its readiness endpoint (HEALTH_PORT, ``/readyz``) says it
    is connected and polling, not merely when its metrics endpoint answers."""
    health_port = int(_environment(WORKER)["HEALTH_PORT"])
    assert "health_port" in Settings.model_fields
    assert f"127.0.0.1:{health_port}/readyz" in _healthcheck_text(WORKER)


def test_prometheus_scrapes_the_collector_and_temporal_where_they_serve() -> None:
    """The collector is scraped at its prometheus exporter's port and Temporal at its
    PROMETHEUS_ENDPOINT; every static target is a compose service."""
    targets = [target for job in _scrape_jobs().values() for target in _static_targets(job)]
    exporter_port = _port_of(_otel()["exporters"]["prometheus"]["endpoint"])
    assert f"otel-collector:{exporter_port}" in targets
    temporal_port = _port_of(_environment("temporal")["PROMETHEUS_ENDPOINT"])
    assert f"temporal:{temporal_port}" in targets
    for target in targets:
        host = target.rsplit(":", 1)[0]
        assert host == "localhost" or host in _services(), f"unknown scrape target {target}"


# ----------------------------------------------------------------------------- elasticmq


def test_elasticmq_creates_the_dead_letter_queue_the_worker_uses() -> None:
    """ElasticMQ's config, mounted where the image reads it, creates the queue named by the
    worker's DLQ_QUEUE_NAME, which is also the contract's default."""
    dlq = _environment(WORKER)["DLQ_QUEUE_NAME"]
    assert dlq == Settings.model_fields["dlq_queue_name"].default
    assert dlq in _elasticmq_queues(ELASTICMQ_FILE.read_text(encoding="utf-8"))
    assert "./deploy/elasticmq.conf:/opt/elasticmq.conf:ro" in _services()["elasticmq"]["volumes"]


# ----------------------------------------------------------------------------- grafana


def test_grafana_is_provisioned_with_the_dashboard_and_its_datasources() -> None:
    """Grafana mounts the provisioning and dashboard folders where the provider looks, and
    every panel queries a provisioned datasource."""
    volumes = [str(volume) for volume in _services()["grafana"]["volumes"]]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in volumes
    providers = _load_yaml(GRAFANA_DIR / "provisioning" / "dashboards" / "dashboards.yml")
    path = providers["providers"][0]["options"]["path"]
    assert f"./deploy/grafana/dashboards:{path}:ro" in volumes

    datasources = _load_yaml(GRAFANA_DIR / "provisioning" / "datasources" / "datasources.yml")
    uids = {source["uid"] for source in datasources["datasources"]}
    for source in datasources["datasources"]:
        host = urlsplit(source["url"]).hostname
        assert host in _services(), f"datasource {source['uid']} points at unknown {host}"
    for panel in _dashboard()["panels"]:
        assert panel["datasource"]["uid"] in uids, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in uids, panel["title"]


def test_dashboard_shows_runs_by_state_transitions_retries_dead_letters_review_wait() -> None:
    """The dashboard has a panel for each thing operators watch, on the documented metrics."""
    exprs = " ".join(expr for group in _dashboard_exprs().values() for expr in group)
    for needle in (
        'label_replace(aiorch_transitions_total, "state", "$1", "to_state"',
        "aiorch_transitions_total",
        "aiorch_llm_retries_total",
        'to_state="dead_letter"',
        "aiorch_review_wait_seconds_bucket",
    ):
        assert needle in exprs, f"no panel queries {needle}"


def test_docs_explain_what_is_published_and_where_the_secrets_live() -> None:
    """docs/docker.md gives every published address, the reason for any port beyond loopback,
    each secret's volume, each operator command of secrets.sh, and the advice to pin image
    digests."""
    docs = DOCS_FILE.read_text(encoding="utf-8")
    for name, spec in _services().items():
        for port in _ports_of(spec):
            assert f"127.0.0.1:{port.host_port}" in docs, f"{name}'s port is undocumented"
    for reason in NOT_LOOPBACK.values():
        assert reason in docs
    job = _secrets_job(_services())
    assert job is not None
    for mount in _mounts_of(_services()[job]):
        if mount.named:
            assert f"`{mount.source}`" in docs, f"volume {mount.source} is undocumented"
    commands = re.findall(r"^([a-z-]+)\) ", SECRETS_SCRIPT.read_text(encoding="utf-8"), re.M)
    assert commands[0] == "init" and len(commands) == 6  # init: what `up` runs
    for command in commands[1:]:
        assert f"secrets {command}" in docs, f"secrets.sh {command} is undocumented"
    assert "@sha256:" in docs, "no word on pinning digests"


def test_docs_match_the_stack() -> None:
    """docs/docker.md shows the dashboard's runs-by-state query verbatim, names every image
    compose pins, and documents every aiorch_* metric the dashboard queries."""
    docs = DOCS_FILE.read_text(encoding="utf-8")
    runs_by_state = _dashboard_exprs()["Open runs by state"]
    assert runs_by_state and all(expr in docs for expr in runs_by_state)
    for name, spec in _services().items():
        if "image" in spec:
            assert f"`{spec['image']}`" in docs, f"{name}'s image {spec['image']} is undocumented"
    exprs = " ".join(expr for group in _dashboard_exprs().values() for expr in group)
    for metric in set(re.findall(r"aiorch_[a-z_]+", exprs)):
        base = re.sub(r"_(bucket|count|sum)$", "", metric)
        assert f"`{base}`" in docs, f"{base} is not documented"
