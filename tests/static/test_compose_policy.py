"""The stack meets its hardening policy (`tests.static.compose_policy`), and every checker of
that policy objects when its rule is broken, in a small bad stack and in the real one."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.static.compose import (
    WORKER,
    compose_document,
    compose_services,
    container_ports,
    healthcheck_text,
    mount_holding,
    mounts_of,
    ports_of,
    published_ports,
    service_environment,
)
from tests.static.compose_policy import (
    CHECKERS,
    PLACEHOLDERS,
    PUBLISHED,
    encryption_problems,
    exposure_problems,
    generator_problems,
    grafana_problems,
    key_source,
    secret_mount,
    secret_problems,
)


def test_only_needed_ports_are_published_and_only_on_loopback() -> None:
    """Every published port is bound to 127.0.0.1; only the services in PUBLISHED publish one
    (each of them does), and none shares the host's network."""
    assert exposure_problems(compose_document()) == []
    published = {
        (name, port.container_port)
        for name in compose_services()
        for port in ports_of(compose_services()[name])
    }
    assert published == set(PUBLISHED)


def test_no_service_sets_a_literal_secret() -> None:
    """No password, token or key is written into docker-compose.yml; the placeholders allowed
    instead are exactly the values the stack sets."""
    assert secret_problems(compose_document()) == []
    for (service, variable), (value, _reason) in PLACEHOLDERS.items():
        assert service_environment(service)[variable] == value, (
            f"stale placeholder {service} {variable}"
        )


def test_grafana_needs_a_login_with_a_generated_password() -> None:
    """Grafana has no anonymous access or sign-up, and its admin password is the generated one."""
    assert grafana_problems(compose_document()) == []
    mount = secret_mount(
        compose_services()["grafana"],
        service_environment("grafana")["GF_SECURITY_ADMIN_PASSWORD__FILE"],
    )
    assert mount is not None and mount.source == "grafana-admin-password"


def test_payloads_are_encrypted_and_the_ui_decodes_through_the_codec_server() -> None:
    """The worker encrypts with the generated key ring and refuses plaintext; the codec server
    reads the same ring and the token; the UI's codec endpoint is the codec server's published
    port plus that token, the codec server admits the UI's origin for CORS, and it listens
    where it is published and probed."""
    assert encryption_problems(compose_document()) == []
    ui_port = published_ports("temporal-ui")[0]
    origin = f"http://localhost:{ui_port}"
    assert service_environment("codec-server")["TEMPORAL_UI_URL"] == origin
    assert service_environment(WORKER)["TEMPORAL_UI_URL"] == origin
    assert (
        service_environment("codec-server")["TEMPORAL_NAMESPACE"]
        == service_environment(WORKER)["TEMPORAL_NAMESPACE"]
    )
    codec_port = int(service_environment("codec-server")["CODEC_SERVER_PORT"])
    assert codec_port in container_ports("codec-server")
    assert f"'127.0.0.1', {codec_port}" in healthcheck_text("codec-server")


def test_the_inbox_signs_with_a_generated_key_the_worker_trusts() -> None:
    """The inbox reads its signing key and its reviewers' token hashes from the secrets job's
    volumes, and the worker the key's public half, so reviews the inbox signs are accepted and
    unsigned ones are not; the inbox decodes with the worker's key ring, listens where it is
    published and probed, and the worker's notification links point at it."""
    inbox, worker = service_environment("inbox"), service_environment(WORKER)
    spec = compose_services()["inbox"]
    mounts = {
        variable: secret_mount(spec, inbox[variable])
        for variable in ("INBOX_SIGNING_KEY_FILE", "PAYLOAD_KEYS_FILE")
    }
    assert {v: m.source if m else None for v, m in mounts.items()} == {
        "INBOX_SIGNING_KEY_FILE": "inbox-key",
        "PAYLOAD_KEYS_FILE": "payload-keys",
    }
    tokens = mount_holding(spec, inbox["INBOX_TOKENS_FILE"])
    assert tokens is not None and tokens.source == "inbox-tokens" and tokens.read_only
    public = secret_mount(compose_services()[WORKER], worker["REVIEW_PUBLIC_KEYS_FILE"])
    assert public is not None and public.source == "review-public-keys"
    assert key_source(spec, "PAYLOAD_KEYS") == key_source(
        compose_services()[WORKER], "PAYLOAD_KEYS"
    )
    assert inbox["REQUIRE_ENCRYPTION"] == "true"
    assert inbox["TEMPORAL_NAMESPACE"] == worker["TEMPORAL_NAMESPACE"]
    assert inbox["TEMPORAL_ADDRESS"] == worker["TEMPORAL_ADDRESS"]
    port = int(inbox["INBOX_PORT"])
    assert port in container_ports("inbox") and f"127.0.0.1:{port}/healthz" in healthcheck_text(
        "inbox"
    )
    assert (
        inbox["INBOX_URL"]
        == worker["INBOX_URL"]
        == f"http://localhost:{published_ports('inbox')[0]}"
    )
    assert "inbox-key" not in {m.source for m in mounts_of(compose_services()[WORKER])}


def test_secrets_are_generated_into_named_volumes_only() -> None:
    """The secrets job writes only named volumes, has no network, and everything that reads a
    secret reads it read-only from those volumes after the job has finished."""
    assert generator_problems(compose_document()) == []


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
    "capacity-store-published-on-loopback": (
        "exposure",
        "redis: publishes 6379",
        _set("redis.ports", ["127.0.0.1:6379:6379"]),
    ),
    "capacity-store-url-in-compose": (
        "secrets",
        "worker: CAPACITY_STORE_URL is set to a literal",
        _both(
            _set("worker.environment.CAPACITY_STORE_URL_FILE", None),
            _set("worker.environment.CAPACITY_STORE_URL", "redis://:hunter2@redis:6379/0"),
        ),
    ),
    "capacity-store-url-file-in-the-repo": (
        "secrets",
        "CAPACITY_STORE_URL_FILE is not a file in a read-only named volume",
        _both(
            _set("worker.environment.CAPACITY_STORE_URL_FILE", "/store/url"),
            _add_volume(WORKER, "./.data/store:/store:ro"),
        ),
    ),
    "capacity-store-url-mounted-writable": (
        "generator",
        "worker: mounts capacity-store-url writable",
        _replace_volume(
            WORKER,
            "capacity-store-url:/run/aiorch/capacity-store-url:ro",
            "capacity-store-url:/run/aiorch/capacity-store-url",
        ),
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
    doc = copy.deepcopy(compose_document())
    change(doc)
    problems = CHECKERS[checker](doc)
    assert any(reason in problem for problem in problems), f"{checker}: {problems}"
