"""The Docker stack, checked without Docker: docker-compose.yml and the Dockerfiles agree with
each other and with the worker's configuration (`aiorch_runtime.config.Settings`), and
docs/docker.md describes the stack as it is."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

from aiorch_runtime.config import Settings
from aiorch_runtime.config_sources import SECRET_FILE_FIELDS
from tests.static.compose import (
    ADDRESS_OR_NAME_SUFFIXES,
    APP_DOCKERFILE,
    CAPACITY_STORE,
    COMPOSE_FILE,
    CONTRACT_VARIABLES,
    DOCKERIGNORE,
    DOCS_FILE,
    ELASTICMQ_FILE,
    EXTERNAL_VARIABLES,
    GRAFANA_DIR,
    NOT_WIRED,
    OTEL_FILE,
    PENDING_SETTINGS,
    PROMETHEUS_FILE,
    REDIS_CONF,
    ROOT,
    SECRETS_SCRIPT,
    WORKER,
    WORKER_DEPENDENCIES,
    argv_of,
    base_images,
    compose_dockerfiles,
    compose_document,
    compose_services,
    container_ports,
    dashboard_exprs,
    dockerfile_instructions,
    healthcheck_text,
    image_is_pinned,
    load_yaml,
    mount_holding,
    mounts_of,
    one_shot_services,
    otel_config,
    port_of,
    ports_of,
    published_ports,
    redis_conf,
    service_depends_on,
    service_environment,
)
from tests.static.compose_policy import (
    NOT_LOOPBACK,
    secret_mount,
    secrets_job,
)
from workflows import contract


def test_yaml_files_parse() -> None:
    """Every YAML file of the stack parses to a mapping."""
    paths = [
        COMPOSE_FILE,
        OTEL_FILE,
        PROMETHEUS_FILE,
        *sorted((GRAFANA_DIR / "provisioning").rglob("*.yml")),
    ]
    for path in paths:
        assert isinstance(load_yaml(path), dict), f"{path.relative_to(ROOT)} is not a mapping"


def test_compose_bind_mounts_and_scripts_exist() -> None:
    """Every file or directory compose mounts from the repo exists, and so does every script a
    service runs from a mounted directory."""
    for name, spec in compose_services().items():
        mounts: dict[str, Path] = {}
        for volume in spec.get("volumes") or []:
            source, target = str(volume).split(":")[:2]
            if source.startswith("."):
                host = ROOT / source
                assert host.exists(), f"{name}: mounts missing {source}"
                mounts[target] = host
        for arg in argv_of(spec, "entrypoint") + argv_of(spec, "command"):
            for target, host in mounts.items():
                if arg.startswith(target + "/"):
                    script = host / arg.removeprefix(target + "/")
                    assert script.is_file(), f"{name}: runs missing {arg}"


def test_every_service_uses_a_pinned_image_or_a_build() -> None:
    """Each service names an image with an explicit version tag (never ``latest``, never
    untagged) or builds one from the repo."""
    problems = []
    for name, spec in compose_services().items():
        if "build" in spec and "image" not in spec:
            continue
        image = spec.get("image")
        if not image or not image_is_pinned(str(image)):
            problems.append(f"{name}: {image!r}")
    assert not problems, "unpinned images: " + ", ".join(problems)


def test_built_images_pin_their_base_images() -> None:
    """Every Dockerfile compose builds exists and pulls only version-pinned images."""
    dockerfiles = compose_dockerfiles()
    assert dockerfiles, "no service is built from the repo"
    for name, path in dockerfiles.items():
        assert path.is_file(), f"{name}: no Dockerfile at {path}"
        images = base_images(path)
        assert images, f"{path.relative_to(ROOT)} has no FROM"
        unpinned = [image for image in images if not image_is_pinned(image)]
        assert not unpinned, f"{path.relative_to(ROOT)} pulls unpinned {unpinned}"


def test_app_image_is_slim_python_runs_the_worker_as_non_root() -> None:
    """The project image is python:3.11 slim, installs the hash-locked runtime set (never a
    dev extra or the dev lock) and then the project without resolving anything, ends as a
    non-root user and runs ``python worker.py`` by default."""
    instructions = list(dockerfile_instructions(APP_DOCKERFILE))
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
        assert "--no-deps" in command, command
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

    for keyword, args in dockerfile_instructions(APP_DOCKERFILE):
        if keyword != "COPY" or "--from=" in args:
            continue
        sources = [word for word in args.split() if not word.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY of missing {source}"
            assert not ignored(source.rstrip("/")), f"{source} is copied but ignored"
    for local in (".venv", ".venv-3.12", ".git", ".data", "tests"):
        assert ignored(local), f"{local} would be sent to the build"


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
    environment = service_environment(WORKER)
    missing = sorted(name for name in required if not environment.get(name))
    assert not missing, f"worker environment lacks {missing}"


def test_worker_environment_names_only_known_variables() -> None:
    """Every variable set on the worker is read by Settings or by a library (a typo would
    otherwise be ignored silently, since Settings ignores unknown variables)."""
    fields = {name.upper() for name in Settings.model_fields}
    unknown = sorted(
        name
        for name in service_environment(WORKER)
        if name not in fields | EXTERNAL_VARIABLES | PENDING_SETTINGS
    )
    assert not unknown, f"nothing reads {unknown}"


def test_metrics_port_is_a_setting() -> None:
    """METRICS_PORT, which compose sets and Prometheus scrapes, is read by Settings."""
    assert "metrics_port" in Settings.model_fields


def test_the_worker_listens_where_it_is_scraped_and_probed_only() -> None:
    """The worker's own defaults are loopback; the image listens on the container's interfaces
    (a collector scrapes it, an orchestrator probes it); compose keeps the metrics open to
    Prometheus, on the port it scrapes, and the probes on loopback, where its health check
    reads them from inside the container."""
    defaults = Settings()
    assert (defaults.metrics_host, defaults.health_host) == ("127.0.0.1", "127.0.0.1")
    image_env = " ".join(
        args for keyword, args in dockerfile_instructions(APP_DOCKERFILE) if keyword == "ENV"
    )
    assert "METRICS_HOST=0.0.0.0" in image_env and "HEALTH_HOST=0.0.0.0" in image_env
    env = service_environment(WORKER)
    assert env["METRICS_HOST"] == "0.0.0.0"
    [job] = [
        job
        for job in load_yaml(PROMETHEUS_FILE)["scrape_configs"]
        if job["job_name"] == "ai-orchestrator-worker"
    ]
    [scraped] = job["dns_sd_configs"]
    assert scraped["names"] == [WORKER] and scraped["port"] == int(env["METRICS_PORT"])
    assert env["HEALTH_HOST"] == "127.0.0.1"
    assert f"http://127.0.0.1:{env['HEALTH_PORT']}/readyz" in healthcheck_text(WORKER)


def test_worker_addresses_reach_the_services_that_serve_them() -> None:
    """Each address the worker is given names a compose service and the port that service
    listens on according to its own config."""
    env = service_environment(WORKER)
    services = compose_services()

    host, port = env["TEMPORAL_ADDRESS"].rsplit(":", 1)
    assert host == "temporal" and int(port) in container_ports("temporal")

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
    assert vectors.hostname == "qdrant" and vectors.port in container_ports("qdrant")

    otlp = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    grpc = otel_config()["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert otlp.hostname == "otel-collector" and otlp.port == port_of(grpc)


def test_worker_names_match_the_contract_and_the_setup_job() -> None:
    """The worker polls the contract's task queue in the namespace the setup job creates."""
    env = service_environment(WORKER)
    assert env["TEMPORAL_TASK_QUEUE"] == contract.DEFAULT_TASK_QUEUE
    assert env["TEMPORAL_NAMESPACE"] == service_environment("temporal-namespace")["NAMESPACE"]
    assert (
        env["TEMPORAL_NAMESPACE"]
        == service_environment("temporal-ui")["TEMPORAL_DEFAULT_NAMESPACE"]
    )


def test_depends_on_targets_exist_and_can_meet_their_condition() -> None:
    """Every depends_on target is a service; a ``service_healthy`` target has a health check
    and a ``service_completed_successfully`` target is a job that is not restarted forever."""
    services = compose_services()
    for name in services:
        for target, condition in service_depends_on(name).items():
            assert target in services, f"{name} depends on unknown {target}"
            spec = services[target]
            if condition == "service_healthy":
                assert healthcheck_text(target), f"{name} waits for {target} to be healthy"
                assert not spec["healthcheck"].get("disable"), target
            elif condition == "service_completed_successfully":
                assert spec.get("restart") not in {"always", "unless-stopped"}, target
            else:
                assert condition == "service_started", f"{name}: unknown condition {condition}"


def test_long_running_services_have_health_checks() -> None:
    """Every service except the one-shot setup jobs declares a health check."""
    missing = sorted(
        name
        for name in compose_services()
        if name not in one_shot_services() and not healthcheck_text(name)
    )
    assert not missing, f"no health check: {missing}"


def test_worker_starts_after_temporal_sqs_qdrant_llm_collector_and_store() -> None:
    """The worker waits for Temporal and its namespace, the SQS endpoint, Qdrant, the LLM
    simulator, the collector and the capacity store, each with the condition that proves it
    ready."""
    depends = service_depends_on(WORKER)
    for target, condition in WORKER_DEPENDENCIES.items():
        assert depends.get(target) == condition, f"worker -> {target}: {depends.get(target)}"


def test_the_capacity_store_is_internal_and_locked_down() -> None:
    """The capacity store publishes no port and is not on the host's network; it runs the repo's
    redis.conf, mounted read-only where its command reads it, as the non-root user secrets.sh
    hands its ACL file to, with a read-only root filesystem and no capability; its data is a
    declared named volume at the working directory redis.conf snapshots into; it starts after
    the secrets job."""
    spec = compose_services()[CAPACITY_STORE]
    assert not ports_of(spec) and spec.get("network_mode") is None
    conf = argv_of(spec, "command")[-1]
    conf_mount = mount_holding(spec, conf)
    assert conf_mount is not None and conf_mount.read_only
    assert conf_mount.source == "./" + REDIS_CONF.relative_to(ROOT).as_posix()

    script = SECRETS_SCRIPT.read_text(encoding="utf-8")
    owner = re.search(r"^REDIS_OWNER=\$\{REDIS_OWNER:-([\d:]+)\}", script, re.M)
    assert owner and str(spec.get("user")) == owner[1], "redis would not read its ACL file"
    assert owner[1].split(":")[0] != "0"
    assert spec.get("read_only") is True
    assert spec.get("cap_drop") == ["ALL"] and not spec.get("cap_add")

    assert "dir" not in redis_conf(), "snapshots go to the image's working directory, /data"
    data = mount_holding(spec, "/data/dump.rdb")
    assert data is not None and data.target == "/data" and data.named and not data.read_only
    assert data.source in (compose_document().get("volumes") or {})
    assert redis_conf()["dbfilename"] == ["dump.rdb"] and redis_conf()["save"]
    assert service_depends_on(CAPACITY_STORE).get("secrets") == "service_completed_successfully"


def test_the_capacity_store_admits_only_whom_the_secrets_job_allows() -> None:
    """Redis reads its users from the ACL file in the redis-acl volume, which the secrets job
    writes and the store mounts read-only; no password is set anywhere else (redis.conf, its
    command line, its healthcheck, which runs as the ACL's PING-only user)."""
    spec = compose_services()[CAPACITY_STORE]
    conf = redis_conf()
    acl = mount_holding(spec, conf["aclfile"][0])
    assert acl is not None and acl.named and acl.read_only and acl.source == "redis-acl"
    job = secrets_job(compose_services())
    assert job is not None
    written = {m.source for m in mounts_of(compose_services()[job]) if not m.read_only}
    assert "redis-acl" in written
    assert not {"requirepass", "masterauth", "masteruser"} & set(conf)
    assert not any("requirepass" in arg for arg in argv_of(spec, "command"))
    health = healthcheck_text(CAPACITY_STORE)
    assert "--user healthcheck" in health and "redis-cli" in health
    assert 'print("user healthcheck on nopass resetchannels -@all +ping")' in (
        SECRETS_SCRIPT.read_text(encoding="utf-8")
    ), "the healthcheck's user may do more than PING"


def test_worker_gets_the_capacity_store_url_from_its_secret_file_only() -> None:
    """The worker reads the store's URL, password included, from the capacity-store-url volume
    (CAPACITY_STORE_URL_FILE, read-only); no service is given a redis:// URL or the variable
    itself, and docker-compose.yml holds none. The URL secrets.sh writes names the redis service
    and the port redis.conf sets."""
    worker = compose_services()[WORKER]
    env = service_environment(WORKER)
    mount = secret_mount(worker, env.get("CAPACITY_STORE_URL_FILE"))
    assert mount is not None and mount.source == "capacity-store-url"
    for name in compose_services():
        environment = service_environment(name)
        assert "CAPACITY_STORE_URL" not in environment, name
        assert not any("redis://" in value for value in environment.values()), name
    assert "redis://" not in COMPOSE_FILE.read_text(encoding="utf-8")

    template = re.search(r"printf '(rediss?://[^']*)\\n'", SECRETS_SCRIPT.read_text())
    assert template, "secrets.sh writes no store URL"
    url = urlsplit(template[1])
    assert url.hostname == CAPACITY_STORE and url.password == "%s"
    assert url.port == int(redis_conf()["port"][0])


def test_published_host_ports_do_not_collide() -> None:
    """No two services publish the same host port, and the worker publishes none (so it can
    be scaled)."""
    seen: dict[int, str] = {}
    for name in compose_services():
        for port in published_ports(name):
            assert port not in seen, f"host port {port}: {seen[port]} and {name}"
            seen[port] = name
    assert not published_ports(WORKER)
    assert published_ports("temporal-ui") == [8233]
    assert container_ports("temporal-ui") == {8080}


def test_named_volumes_keep_postgres_and_qdrant_data() -> None:
    """PostgreSQL's and Qdrant's data live in declared named volumes."""
    declared = set(compose_document().get("volumes") or {})
    for service, path in (("postgres", "/var/lib/postgresql/data"), ("qdrant", "/qdrant/storage")):
        sources = [
            str(volume).split(":")[0]
            for volume in compose_services()[service].get("volumes") or []
            if str(volume).split(":")[1] == path
        ]
        assert sources and sources[0] in declared, f"{service}: {path} is not a named volume"


def test_docs_explain_what_is_published_and_where_the_secrets_live() -> None:
    """docs/docker.md gives every published address, the reason for any port beyond loopback,
    each secret's volume, each operator command of secrets.sh, and the advice to pin image
    digests."""
    docs = DOCS_FILE.read_text(encoding="utf-8")
    for name, spec in compose_services().items():
        for port in ports_of(spec):
            assert f"127.0.0.1:{port.host_port}" in docs, f"{name}'s port is undocumented"
    for reason in NOT_LOOPBACK.values():
        assert reason in docs
    job = secrets_job(compose_services())
    assert job is not None
    for mount in mounts_of(compose_services()[job]):
        if mount.named:
            assert f"`{mount.source}`" in docs, f"volume {mount.source} is undocumented"
    commands = re.findall(r"^([a-z-]+)\) ", SECRETS_SCRIPT.read_text(encoding="utf-8"), re.M)
    assert commands[0] == "init" and len(commands) == 7  # init: what `up` runs
    for command in commands[1:]:
        assert f"secrets {command}" in docs, f"secrets.sh {command} is undocumented"
    assert "@sha256:" in docs, "no word on pinning digests"


def test_docs_match_the_stack() -> None:
    """docs/docker.md shows the dashboard's runs-by-state query verbatim, names every image
    compose pins, and documents every aiorch_* metric the dashboard queries."""
    docs = DOCS_FILE.read_text(encoding="utf-8")
    runs_by_state = dashboard_exprs()["Open runs by state"]
    assert runs_by_state and all(expr in docs for expr in runs_by_state)
    for name, spec in compose_services().items():
        if "image" in spec:
            assert f"`{spec['image']}`" in docs, f"{name}'s image {spec['image']} is undocumented"
    exprs = " ".join(expr for group in dashboard_exprs().values() for expr in group)
    for metric in set(re.findall(r"aiorch_[a-z_]+", exprs)):
        base = re.sub(r"_(bucket|count|sum)$", "", metric)
        assert f"`{base}`" in docs, f"{base} is not documented"


def test_the_temporal_server_dispatches_tenants_tasks_fairly() -> None:
    """The stack's Temporal server reads a mounted dynamic config file that turns task queue
    fairness on, so the tenants' fairness keys starter.py sets are honoured."""
    spec = compose_services()["temporal"]
    path = service_environment("temporal")["DYNAMIC_CONFIG_FILE_PATH"]
    mount = mount_holding(spec, path)
    assert mount is not None and mount.read_only
    assert mount.source is not None
    source = COMPOSE_FILE.parent / mount.source
    assert load_yaml(source)["matching.enableFairness"] == [{"value": True}]
