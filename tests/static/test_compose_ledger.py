"""The compose stack runs the run ledger (issue 41) on its PostgreSQL: the ``ledger-db`` job
makes the ``ledger`` database with a writer role for the follower and a read-only role for
Grafana, each password a secret of the ``secrets`` job; ``aiorch ledger follow`` runs as a
service of its own with the worker's key ring and the writer's URL from a secret file, reachable
from no host port; Grafana reads the ledger through a provisioned PostgreSQL datasource and
dashboard."""

from __future__ import annotations

import json
import re
from typing import Any

from aiorch.devstack.ledger_dashboard import DASHBOARD_FILE
from tests.static.compose import (
    GRAFANA_DIR,
    LEDGER,
    ROOT,
    WORKER,
    argv_of,
    compose_document,
    compose_services,
    env_of,
    healthcheck_text,
    load_yaml,
    mount_holding,
    mounts_of,
    published_ports,
    service_depends_on,
    service_environment,
)
from tests.static.compose_policy import secret_mount, secrets_job

LEDGER_DB = "ledger-db"
SETUP_SCRIPT = ROOT / "deploy" / "ledger" / "setup-database.sh"


def ledger_datasource() -> dict[str, Any]:
    sources = load_yaml(GRAFANA_DIR / "provisioning" / "datasources" / "datasources.yml")
    [source] = [source for source in sources["datasources"] if source["uid"] == "ledger"]
    assert isinstance(source, dict)
    return source


def secrets_volume(service: str, path: str | None) -> str | None:
    """The secrets job's volume a service reads ``path`` from, read-only; None otherwise."""
    spec = compose_services()[service]
    mount = secret_mount(spec, path)
    job = secrets_job(compose_services())
    assert job is not None
    made = {m.source for m in mounts_of(compose_services()[job]) if m.named and not m.read_only}
    return mount.source if mount is not None and mount.source in made else None


def test_the_ledger_service_follows_with_the_workers_names_and_keys() -> None:
    """The ``ledger`` service runs ``starter.py ledger follow`` from the project's image, on
    the worker's Temporal address, namespace and task queue, with the worker's payload key
    ring mounted read-only at the same path; it waits for Temporal, its namespace and the
    ledger's database."""
    spec = compose_services()[LEDGER]
    assert spec.get("build") == compose_services()[WORKER].get("build")
    assert argv_of(spec, "command")[:4] == ["python", "starter.py", "ledger", "follow"]
    ledger_env, worker_env = service_environment(LEDGER), service_environment(WORKER)
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_TASK_QUEUE"):
        assert ledger_env.get(name) == worker_env[name], name
    keys = worker_env["PAYLOAD_KEYS_FILE"]
    assert ledger_env.get("PAYLOAD_KEYS_FILE") == keys
    ledger_keys = mount_holding(spec, keys)
    worker_keys = mount_holding(compose_services()[WORKER], keys)
    assert ledger_keys is not None and worker_keys is not None
    assert ledger_keys.source == worker_keys.source and ledger_keys.read_only
    depends = service_depends_on(LEDGER)
    assert depends.get("temporal") == "service_healthy"
    assert depends.get("temporal-namespace") == "service_completed_successfully"
    assert depends.get(LEDGER_DB) == "service_completed_successfully"


def test_the_follower_writes_postgresql_with_its_url_from_a_secret_file() -> None:
    """The follower's URL comes from LEDGER_URL_FILE, a file in the secrets job's ``ledger-url``
    volume mounted read-only; no LEDGER_URL is set, and nothing of the ledger is kept on a
    volume of its own any more (no SQLite file)."""
    env = service_environment(LEDGER)
    assert "LEDGER_URL" not in env
    assert secrets_volume(LEDGER, env.get("LEDGER_URL_FILE")) == "ledger-url"
    assert all(mount.read_only for mount in mounts_of(compose_services()[LEDGER]))
    assert "ledger-data" not in (compose_document().get("volumes") or {})
    script = (ROOT / "deploy" / "secrets" / "secrets.sh").read_text(encoding="utf-8")
    assert "postgresql://ledger_writer:%s@postgres:5432/ledger" in script


def test_the_ledger_is_internal_and_healthy_once_it_synced() -> None:
    """The ledger publishes no port and mounts nothing but named volumes; its health check
    reads the watermark a finished sync leaves, in a read-only transaction, through the URL
    file, with no SQLite left."""
    spec = compose_services()[LEDGER]
    assert published_ports(LEDGER) == []
    assert "ports" not in spec and "expose" not in spec
    assert all(mount.named for mount in mounts_of(spec))
    check = healthcheck_text(LEDGER)
    assert "sync_state" in check and "watermark" in check and "read_only = True" in check
    assert service_environment(LEDGER)["LEDGER_URL_FILE"] in check
    assert "sqlite" not in check


def test_the_database_job_runs_the_setup_script_with_the_passwords_from_files() -> None:
    """``ledger-db`` is a one-shot on the postgres service's own image (it has psql): it runs
    deploy/ledger/setup-database.sh mounted read-only, after PostgreSQL is healthy and the
    secrets exist, with the superuser's and both roles' passwords as files in the secrets
    job's volumes; no port, no capability but reading those files, nothing writable."""
    services = compose_services()
    spec = services[LEDGER_DB]
    assert spec["image"] == services["postgres"]["image"]
    argv = argv_of(spec, "entrypoint") + argv_of(spec, "command")
    script = next(arg for arg in argv if arg.endswith(SETUP_SCRIPT.name))
    mount = mount_holding(spec, script)
    assert mount is not None and mount.read_only and mount.source == "./deploy/ledger"
    depends = service_depends_on(LEDGER_DB)
    assert depends == {
        "postgres": "service_healthy",
        "secrets": "service_completed_successfully",
    }
    env = env_of(spec)
    assert secrets_volume(LEDGER_DB, env["POSTGRES_PASSWORD_FILE"]) == "postgres-password"
    for role in ("writer", "reader"):
        variable = f"LEDGER_{role.upper()}_PASSWORD_FILE"
        assert secrets_volume(LEDGER_DB, env[variable]) == f"ledger-{role}-password"
        assert variable in SETUP_SCRIPT.read_text(encoding="utf-8")
    assert (
        env["PGHOST"] == "postgres"
        and env["PGUSER"] == service_environment("postgres")["POSTGRES_USER"]
    )
    assert "ports" not in spec and "expose" not in spec
    assert spec["cap_drop"] == ["ALL"] and spec["cap_add"] == ["DAC_READ_SEARCH"]
    assert spec["read_only"] is True


def test_grafana_reads_the_ledger_as_the_read_only_role_with_a_password_from_a_file() -> None:
    """The ``ledger`` datasource is Grafana's built-in PostgreSQL one, on the postgres service,
    database ``ledger``, role ``ledger_reader``; its password is Grafana's ``$__file{...}`` of a
    file in the secrets job's ``ledger-reader-password`` volume, mounted read-only into Grafana,
    the same volume the database job sets the role's password from; no password is written in
    the provisioning file or in Grafana's environment."""
    source = ledger_datasource()
    assert source["type"] == "grafana-postgresql-datasource"
    assert source["url"].split(":")[0] == "postgres"
    assert source["user"] == "ledger_reader"
    assert source["jsonData"]["database"] == "ledger"
    assert "password" not in source and "password" not in source.get("jsonData", {})
    match = re.fullmatch(r"\$__file\{([^}]+)\}", source["secureJsonData"]["password"])
    assert match is not None, "the password is not read from a file"
    assert secrets_volume("grafana", match[1]) == "ledger-reader-password"
    assert (
        secrets_volume(
            LEDGER_DB, env_of(compose_services()[LEDGER_DB])["LEDGER_READER_PASSWORD_FILE"]
        )
        == "ledger-reader-password"
    )
    assert not any("LEDGER" in name for name in service_environment("grafana"))


def test_the_dashboard_reads_the_ledger_over_its_time_range_and_variables() -> None:
    """Every panel of the ledger dashboard queries the ``ledger`` datasource in SQL narrowed to
    the dashboard's tenant and pipeline variables, and to its time range (the pending reviews,
    which are aged now, aside); the variables are the ledger's tenants and pipelines, several
    at once or all."""
    document = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    variables = {item["name"]: item for item in document["templating"]["list"]}
    assert set(variables) == {"tenant", "pipeline"}
    for name, variable in variables.items():
        assert variable["datasource"]["uid"] == "ledger"
        assert f"SELECT DISTINCT {name} FROM runs" in variable["query"]
        assert variable["multi"] and variable["includeAll"]
    assert len(document["panels"]) >= 11
    for panel in document["panels"]:
        [target] = panel["targets"]
        assert panel["datasource"]["uid"] == target["datasource"]["uid"] == "ledger"
        sql = target["rawSql"]
        assert "runs.tenant IN ($tenant)" in sql and "runs.pipeline IN ($pipeline)" in sql
        assert ("$__timeFilter(" in sql) != (panel["title"] == "Pending reviews by age")
