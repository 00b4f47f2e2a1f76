"""The compose stack runs the run ledger's follower (issue 41): ``aiorch ledger follow`` as a
service of its own, reading the worker's runs with the worker's key ring, into an SQLite file
on a named volume the image's non-root user can write, reachable from no host port."""

from __future__ import annotations

from tests.static.compose import (
    APP_DOCKERFILE,
    LEDGER,
    WORKER,
    argv_of,
    compose_document,
    compose_services,
    dockerfile_instructions,
    healthcheck_text,
    mount_holding,
    mounts_of,
    published_ports,
    service_depends_on,
    service_environment,
)


def test_the_ledger_service_follows_with_the_workers_names_and_keys() -> None:
    """The ``ledger`` service runs ``starter.py ledger follow`` from the project's image, on
    the worker's Temporal address, namespace and task queue, with the worker's payload key
    ring mounted read-only at the same path; it waits for Temporal and its namespace."""
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


def test_the_ledger_is_kept_on_a_named_volume_the_app_user_owns() -> None:
    """LEDGER_URL names an SQLite file inside a declared named volume (writable), and the image
    creates that folder for its non-root user, so a fresh volume starts out the user's."""
    spec = compose_services()[LEDGER]
    url = service_environment(LEDGER)["LEDGER_URL"]
    assert url.startswith("sqlite:////"), url
    path = url.removeprefix("sqlite:///")
    mount = mount_holding(spec, path)
    assert mount is not None and mount.named and not mount.read_only, mount
    assert mount.source in set(compose_document().get("volumes") or {})
    runs = " ".join(
        args for keyword, args in dockerfile_instructions(APP_DOCKERFILE) if keyword == "RUN"
    )
    assert "install -d -o app -g app" in runs and mount.target in runs.split(), runs


def test_the_ledger_is_internal_and_healthy_once_it_synced() -> None:
    """The ledger publishes no port and mounts nothing but its volume and the key ring; its
    health check reads the watermark a finished sync leaves, read-only."""
    spec = compose_services()[LEDGER]
    assert published_ports(LEDGER) == []
    assert "ports" not in spec and "expose" not in spec
    assert all(mount.named for mount in mounts_of(spec))
    check = healthcheck_text(LEDGER)
    assert "mode=ro" in check and "sync_state" in check and "watermark" in check
