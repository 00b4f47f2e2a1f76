"""The collector, Prometheus, ElasticMQ and Grafana configs agree with docker-compose.yml and
with what the worker exports and uses."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from aiorch_runtime.config import Settings
from tests.static.compose import (
    ELASTICMQ_FILE,
    GRAFANA_DIR,
    WORKER,
    compose_dockerfiles,
    compose_services,
    dashboard_exprs,
    elasticmq_queues,
    grafana_dashboard,
    grafana_dashboards,
    healthcheck_text,
    load_yaml,
    otel_config,
    port_of,
    prometheus_config,
    service_environment,
)


def test_collector_pipelines_use_only_defined_components() -> None:
    """Each pipeline names only receivers, processors and exporters defined in the same file,
    and the service enables only defined extensions."""
    otel = otel_config()
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
    otel = otel_config()
    pipelines = otel["service"]["pipelines"]
    otlp = [name for name in pipelines["traces"]["exporters"] if name.split("/")[0] == "otlp"]
    assert otlp, "traces do not go to an otlp exporter"
    exporter = otel["exporters"][otlp[0]]
    assert exporter["endpoint"].rsplit(":", 1)[0] == "jaeger"
    assert port_of(exporter["endpoint"]) == 4317
    assert exporter["tls"]["insecure"] is True
    assert "jaeger" in compose_services()
    assert any(name.split("/")[0] == "prometheus" for name in pipelines["metrics"]["exporters"])


def test_collector_health_check_is_what_compose_probes() -> None:
    """The compose health check probes the health_check extension's port with a binary the
    collector's image actually contains."""
    endpoint = otel_config()["extensions"]["health_check"]["endpoint"]
    probe = healthcheck_text("otel-collector")
    assert f":{port_of(endpoint)}/" in probe
    binary = probe.split()[1]  # after CMD
    dockerfile = compose_dockerfiles()["otel-collector"].read_text(encoding="utf-8")
    assert re.search(rf"COPY --from=\S+ \S+ {re.escape(binary)}\s*$", dockerfile, re.MULTILINE)
    config_mount = [
        str(volume)
        for volume in compose_services()["otel-collector"]["volumes"]
        if str(volume).startswith("./otel-config.yaml:")
    ]
    assert config_mount, "otel-config.yaml is not mounted into the collector"
    target = config_mount[0].split(":")[1]
    assert f"--config={target}" in compose_services()["otel-collector"]["command"]


def _scrape_jobs() -> dict[str, dict[str, Any]]:
    return {job["job_name"]: job for job in prometheus_config()["scrape_configs"]}


def _static_targets(job: Mapping[str, Any]) -> list[str]:
    return [target for group in job.get("static_configs", []) for target in group["targets"]]


def test_prometheus_scrapes_every_worker_at_the_metrics_port() -> None:
    """Workers are found by DNS (every replica) at METRICS_PORT."""
    metrics_port = int(service_environment(WORKER)["METRICS_PORT"])
    jobs = [job for job in _scrape_jobs().values() if job.get("dns_sd_configs")]
    worker_sd = [
        sd for job in jobs for sd in job["dns_sd_configs"] if WORKER in sd.get("names", [])
    ]
    assert worker_sd, "Prometheus does not discover the worker"
    assert all(int(sd["port"]) == metrics_port for sd in worker_sd)


def test_worker_health_check_is_its_readiness_probe() -> None:
    """The worker is healthy when its readiness endpoint (HEALTH_PORT, ``/readyz``) says it
    is connected and polling, not merely when its metrics endpoint answers."""
    health_port = int(service_environment(WORKER)["HEALTH_PORT"])
    assert f"127.0.0.1:{health_port}/readyz" in healthcheck_text(WORKER)


def test_prometheus_scrapes_the_collector_and_temporal_where_they_serve() -> None:
    """The collector is scraped at its prometheus exporter's port and Temporal at its
    PROMETHEUS_ENDPOINT; every static target is a compose service."""
    targets = [target for job in _scrape_jobs().values() for target in _static_targets(job)]
    exporter_port = port_of(otel_config()["exporters"]["prometheus"]["endpoint"])
    assert f"otel-collector:{exporter_port}" in targets
    temporal_port = port_of(service_environment("temporal")["PROMETHEUS_ENDPOINT"])
    assert f"temporal:{temporal_port}" in targets
    for target in targets:
        host = target.rsplit(":", 1)[0]
        assert host == "localhost" or host in compose_services(), f"unknown scrape target {target}"


def test_elasticmq_creates_the_dead_letter_queue_the_worker_uses() -> None:
    """ElasticMQ's config, mounted where the image reads it, creates the queue named by the
    worker's DLQ_QUEUE_NAME, which is also the contract's default."""
    dlq = service_environment(WORKER)["DLQ_QUEUE_NAME"]
    assert dlq == Settings.model_fields["dlq_queue_name"].default
    assert dlq in elasticmq_queues(ELASTICMQ_FILE.read_text(encoding="utf-8"))
    assert (
        "./deploy/elasticmq.conf:/opt/elasticmq.conf:ro"
        in compose_services()["elasticmq"]["volumes"]
    )


def test_grafana_is_provisioned_with_the_dashboard_and_its_datasources() -> None:
    """Grafana mounts the provisioning and dashboard folders where the provider looks, every
    datasource points at a service of the stack (a URL, or PostgreSQL's ``host:port``), and
    every panel of every dashboard queries a provisioned datasource."""
    volumes = [str(volume) for volume in compose_services()["grafana"]["volumes"]]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in volumes
    providers = load_yaml(GRAFANA_DIR / "provisioning" / "dashboards" / "dashboards.yml")
    path = providers["providers"][0]["options"]["path"]
    assert f"./deploy/grafana/dashboards:{path}:ro" in volumes

    datasources = load_yaml(GRAFANA_DIR / "provisioning" / "datasources" / "datasources.yml")
    uids = {source["uid"] for source in datasources["datasources"]}
    for source in datasources["datasources"]:
        url = source["url"]
        host = urlsplit(url if "://" in url else f"//{url}").hostname
        assert host in compose_services(), f"datasource {source['uid']} points at unknown {host}"
    panels = [panel for board in grafana_dashboards() for panel in board["panels"]]
    assert len(panels) > len(grafana_dashboard()["panels"])
    for panel in panels:
        assert panel["datasource"]["uid"] in uids, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in uids, panel["title"]


def test_dashboard_shows_runs_by_state_transitions_retries_dead_letters_review_wait() -> None:
    """The dashboard has a panel for each thing operators watch, on the documented metrics."""
    exprs = " ".join(expr for group in dashboard_exprs().values() for expr in group)
    for needle in (
        'label_replace(aiorch_transitions_total, "state", "$1", "to_state"',
        "aiorch_transitions_total",
        "aiorch_llm_retries_total",
        'to_state="dead_letter"',
        "aiorch_review_wait_seconds_bucket",
    ):
        assert needle in exprs, f"no panel queries {needle}"
