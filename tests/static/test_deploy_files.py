"""The Docker stack, checked without Docker: docker-compose.yml, the Dockerfiles, the collector,
Prometheus, Grafana and ElasticMQ configs must agree with each other and with the worker's
configuration (`aiorch.config.Settings`). Every check reads files only; no engine is used.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from aiorch.config import SECRET_FILE_FIELDS, Settings
from workflows import contract

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
OTEL_FILE = ROOT / "otel-config.yaml"
APP_DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PROMETHEUS_FILE = ROOT / "deploy" / "prometheus.yml"
ELASTICMQ_FILE = ROOT / "deploy" / "elasticmq.conf"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
DOCS_FILE = ROOT / "docs" / "docker.md"

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


def _environment(service: str) -> dict[str, str]:
    """A service's environment as a dict, whichever of the two compose forms it uses."""
    raw = _services()[service].get("environment") or {}
    if isinstance(raw, list):
        pairs = (item.split("=", 1) for item in raw)
        return {key: value for key, value in pairs}
    return {str(key): "" if value is None else str(value) for key, value in raw.items()}


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
    ports: set[int] = set()
    for entry in _services()[service].get("ports") or []:
        if isinstance(entry, dict):
            ports.add(int(entry["target"]))
        else:
            ports.add(int(str(entry).split("/")[0].rsplit(":", 1)[-1]))
    return ports


def _published_ports(service: str) -> list[int]:
    published: list[int] = []
    for entry in _services()[service].get("ports") or []:
        if isinstance(entry, dict):
            if "published" in entry:
                published.append(int(entry["published"]))
            continue
        parts = str(entry).split("/")[0].split(":")
        if len(parts) >= 2:
            published.append(int(parts[-2]))
    return published


def _healthcheck_text(service: str) -> str:
    test = (_services()[service].get("healthcheck") or {}).get("test", [])
    return " ".join(test) if isinstance(test, list) else str(test)


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
        for arg in spec.get("command") or []:
            for target, host in mounts.items():
                if str(arg).startswith(target + "/"):
                    script = host / str(arg).removeprefix(target + "/")
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
    """The project image is python:3.11 slim, installs the project without dev extras, ends as
    a non-root user and runs ``python worker.py`` by default."""
    instructions = list(_dockerfile_instructions(APP_DOCKERFILE))
    froms = [args.split()[0] for keyword, args in instructions if keyword == "FROM"]
    assert froms, "no FROM"
    assert all(re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", image) for image in froms), froms

    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    users = [args for keyword, args in instructions[last_from:] if keyword == "USER"]
    assert users, "the final stage never switches away from root"
    assert users[-1].split(":")[0] not in {"root", "0"}, users[-1]

    runs = " ".join(args for keyword, args in instructions if keyword == "RUN")
    assert re.search(r"pip install \.(\s|$)", runs), "the project is not installed with pip"
    assert "[dev]" not in runs, "dev extras are installed"

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
    for local in (".venv", ".git", ".data", "tests"):
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
    """Workers are found by DNS (every replica) at METRICS_PORT, the port the worker's own
    health check reads."""
    metrics_port = int(_environment(WORKER)["METRICS_PORT"])
    jobs = [job for job in _scrape_jobs().values() if job.get("dns_sd_configs")]
    worker_sd = [
        sd for job in jobs for sd in job["dns_sd_configs"] if WORKER in sd.get("names", [])
    ]
    assert worker_sd, "Prometheus does not discover the worker"
    assert all(int(sd["port"]) == metrics_port for sd in worker_sd)
    assert f"127.0.0.1:{metrics_port}/metrics" in _healthcheck_text(WORKER)


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
