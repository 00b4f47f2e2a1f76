"""The stack's hardening policy as checkers: each takes a whole compose document and returns
its problems (never a secret's value), so the tests run them on the stack and, to prove they
can fail, on documents that break each rule (loopback binds, no default credentials,
encryption on; issue 14, security review H4)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiorch_runtime.config_sources import SECRET_FILE_FIELDS
from tests.static.compose import (
    SECRETS_SCRIPT,
    WORKER,
    WRAPPER_SCRIPT,
    Mount,
    argv_of,
    env_of,
    mount_holding,
    mounts_of,
    ports_of,
)

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


SECRET_WORDS = {"PASSWORD", "PASSWD", "PWD", "SECRET", "TOKEN", "CREDENTIAL", "CREDENTIALS"}


# A value the user must supply: ${NAME}, ${NAME?why} or ${NAME:?why}, never with a default.
REQUIRED_FROM_USER = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(:?\?[^}]*)?\}")


TRUE = {"true", "1", "yes", "on"}


def is_secret_name(name: str) -> bool:
    """PASSWORD, TOKEN, SECRET... in a variable's name, a name ending in KEY/KEYS (but not
    KEY_ID), or a setting the worker treats as a secret whatever its name (a URL with a password
    in it: CAPACITY_STORE_URL); the ``_FILE``/``__FILE`` form names the same secret."""
    base = re.sub(r"_{1,2}FILE$", "", name.upper().replace("-", "_"))
    words = base.split("_")
    return (
        bool(SECRET_WORDS & set(words))
        or words[-1] in {"KEY", "KEYS"}
        or base.lower() in SECRET_FILE_FIELDS
    )


def image_name(spec: Mapping[str, Any]) -> str:
    return str(spec.get("image", "")).split("@")[0].rsplit(":", 1)[0]


def secret_mount(spec: Mapping[str, Any], path: str | None) -> Mount | None:
    """The read-only named volume a secret file lies in; None for anything else."""
    mount = None if path is None else mount_holding(spec, path)
    return mount if mount is not None and mount.named and mount.read_only else None


def wrapped_files(spec: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """What the entrypoint's with-secrets.sh sets: NAME -> (file, appended to the value)."""
    argv = argv_of(spec, "entrypoint")
    starts = [i for i, arg in enumerate(argv) if arg.endswith("/" + WRAPPER_SCRIPT.name)]
    found: dict[str, tuple[str, bool]] = {}
    for arg in argv[starts[0] + 1 :] if starts else []:
        if arg == "--":
            break
        match = re.fullmatch(r"([A-Za-z_]\w*)(\+?)=(.*)", arg)
        if match:
            found[match[1]] = (match[3], bool(match[2]))
    return found


def secret_files(spec: Mapping[str, Any]) -> list[str]:
    """The secret files a service reads: its secret ``*_FILE`` variables and wrapped files."""
    files = [
        value
        for name, value in env_of(spec).items()
        if value and re.search(r"_FILE$", name) and is_secret_name(name)
    ]
    return files + [file for file, _ in wrapped_files(spec).values()]


def waits_for(services: Mapping[str, Any], name: str) -> dict[str, str]:
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


def secrets_job(services: Mapping[str, Any]) -> str | None:
    """The one-shot service that runs secrets.sh, if there is exactly one."""
    jobs = [
        name
        for name, spec in services.items()
        if any(arg.endswith("/" + SECRETS_SCRIPT.name) for arg in argv_of(spec, "entrypoint"))
    ]
    return jobs[0] if len(jobs) == 1 else None


def exposure_problems(compose: Mapping[str, Any]) -> list[str]:
    """Ports: published only where PUBLISHED says, bound to loopback unless NOT_LOOPBACK says
    why not, and no service on the host's network."""
    problems = []
    for name, spec in compose["services"].items():
        if spec.get("network_mode") == "host":
            problems.append(f"{name}: network_mode host exposes every port it listens on")
        for port in ports_of(spec):
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
        build_args = env_of({"environment": build.get("args")}) if isinstance(build, dict) else {}
        for variable, value in {**env_of(spec), **build_args}.items():
            if value is None or not is_secret_name(variable):
                continue
            if re.search(r"_FILE$", variable):
                if secret_mount(spec, value) is None:
                    problems.append(f"{name}: {variable} is not a file in a read-only named volume")
            elif not REQUIRED_FROM_USER.fullmatch(value):
                placeholder = PLACEHOLDERS.get((name, variable))
                if placeholder is None or placeholder[0] != value:
                    problems.append(f"{name}: {variable} is set to a literal value")
        for arg in argv_of(spec, "entrypoint") + argv_of(spec, "command"):
            match = re.fullmatch(r"-{0,2}([A-Za-z_][\w-]*)\+?=(.*)", arg)
            if match and is_secret_name(match[1]) and secret_mount(spec, match[2]) is None:
                problems.append(f"{name}: argument {match[1]}= holds a literal secret")
    return problems


def grafana_problems(compose: Mapping[str, Any]) -> list[str]:
    """Grafana: anonymous access explicitly off, no proxy auth or sign-up, and an admin password
    of its own (a file in a named volume, or required from the user), never admin/admin."""
    problems = []
    for name, spec in compose["services"].items():
        if not image_name(spec).startswith("grafana/grafana"):
            continue
        env = env_of(spec)
        if (env.get("GF_AUTH_ANONYMOUS_ENABLED") or "").lower() != "false":
            problems.append(
                f'{name}: anonymous access is not off (GF_AUTH_ANONYMOUS_ENABLED: "false")'
            )
        for variable in ("GF_AUTH_PROXY_ENABLED", "GF_USERS_ALLOW_SIGN_UP"):
            if (env.get(variable) or "").lower() in TRUE:
                problems.append(f"{name}: {variable} lets someone in without the admin's say")
        password = env.get("GF_SECURITY_ADMIN_PASSWORD")
        password_file = env.get("GF_SECURITY_ADMIN_PASSWORD__FILE")
        if password is not None and not REQUIRED_FROM_USER.fullmatch(password):
            problems.append(f"{name}: the admin password is a literal (or has a default)")
        elif password is None and secret_mount(spec, password_file) is None:
            problems.append(f"{name}: no admin password of its own; Grafana would use admin/admin")
    return problems


def key_source(spec: Mapping[str, Any], secret: str) -> str | None:
    """Where a service's secret comes from: its volume, or the variable required from the
    user; None when it has none."""
    env = env_of(spec)
    mount = secret_mount(spec, env.get(f"{secret}_FILE"))
    if mount is not None:
        return f"volume {mount.source}"
    value = env.get(secret)
    return value if value and REQUIRED_FROM_USER.fullmatch(value) else None


def runs_codec_server(spec: Mapping[str, Any]) -> bool:
    """Whether a service's command is the project's CLI serving ``codec-server``."""
    argv = argv_of(spec, "command")
    if "codec-server" not in argv:
        return False
    program = argv[: argv.index("codec-server")]
    return any(Path(arg).name in ("starter.py", "aiorch") for arg in program) or (
        program[-2:] == ["-m", "aiorch"]
    )


def encryption_problems(compose: Mapping[str, Any]) -> list[str]:
    """Encryption on: the worker has payload keys and REQUIRE_ENCRYPTION; a codec server reads
    the same keys and a token; the Web UI's codec endpoint is that server's published port with
    the token appended from the same secret."""
    services = compose["services"]
    problems = []
    worker = services.get(WORKER, {})
    keys = key_source(worker, "PAYLOAD_KEYS")
    if keys is None:
        problems.append("worker: no PAYLOAD_KEYS_FILE in a read-only named volume: plain text")
    if (env_of(worker).get("REQUIRE_ENCRYPTION") or "").lower() not in TRUE:
        problems.append("worker: REQUIRE_ENCRYPTION is not true: plaintext payloads pass")
    codecs = {name: spec for name, spec in services.items() if runs_codec_server(spec)}
    if not codecs:
        problems.append("no codec server (python starter.py codec-server): the UI shows ciphertext")
    tokens: set[str | None] = set()
    codec_ports: set[str | None] = set()
    for name, spec in codecs.items():
        if key_source(spec, "PAYLOAD_KEYS") != keys:
            problems.append(f"{name}: does not read the worker's payload keys")
        token = key_source(spec, "CODEC_SERVER_TOKEN")
        if token is None:
            problems.append(f"{name}: no CODEC_SERVER_TOKEN_FILE in a read-only named volume")
        tokens.add(token)
        codec_ports |= {port.host_port for port in ports_of(spec)}
    uis = {name: spec for name, spec in services.items() if image_name(spec) == "temporalio/ui"}
    for name, spec in uis.items():
        endpoint = urlsplit(env_of(spec).get("TEMPORAL_CODEC_ENDPOINT") or "")
        if (
            endpoint.hostname not in {"localhost", LOOPBACK}
            or str(endpoint.port) not in codec_ports
        ):
            problems.append(f"{name}: TEMPORAL_CODEC_ENDPOINT is not the codec server's port")
        if not endpoint.path.endswith("/"):
            problems.append(f"{name}: TEMPORAL_CODEC_ENDPOINT must end in / (the token follows)")
        file, appended = wrapped_files(spec).get("TEMPORAL_CODEC_ENDPOINT", ("", False))
        mount = secret_mount(spec, file)
        if not appended or mount is None or f"volume {mount.source}" not in tokens:
            problems.append(f"{name}: its codec endpoint does not carry the codec server's token")
    return problems


def generator_problems(compose: Mapping[str, Any]) -> list[str]:
    """The secrets job: writes only into declared named volumes (every bind mount read-only,
    every directory secrets.sh writes is such a volume), has no network and no port; every
    secret file another service reads lies in one of those volumes, mounted read-only, and its
    reader waits for the job to finish."""
    services = compose["services"]
    job = secrets_job(services)
    if job is None:
        return [f"not exactly one service runs {SECRETS_SCRIPT.name}"]
    spec = services[job]
    problems = []
    declared = set(compose.get("volumes") or {})
    written = {m.target: m.source for m in mounts_of(spec) if m.named and not m.read_only}
    for mount in mounts_of(spec):
        if not mount.read_only and not mount.named:
            where = mount.source or "an anonymous volume"
            problems.append(f"{job}: can write to {where} at {mount.target}, not a named volume")
        if mount.named and mount.source not in declared:
            problems.append(f"{job}: volume {mount.source} is not declared")
    if spec.get("network_mode") != "none" or ports_of(spec):
        problems.append(f"{job}: has a network; generating secrets needs none")
    root = env_of(spec).get("SECRETS_ROOT") or "/secrets"
    for directory in sorted(set(re.findall(r"\$ROOT/([\w.-]+)/", SECRETS_SCRIPT.read_text()))):
        if f"{root}/{directory}" not in written:
            problems.append(f"{job}: {SECRETS_SCRIPT.name} writes {directory}, not a named volume")
    for name, other in services.items():
        if name == job:
            continue
        for path in secret_files(other):
            holder = mount_holding(other, path)
            if holder is None or not holder.named or holder.source not in written.values():
                problems.append(f"{name}: reads {path} from outside the {job} job's volumes")
            elif not holder.read_only:
                problems.append(f"{name}: mounts {holder.source} writable")
            elif waits_for(services, name).get(job) != "service_completed_successfully":
                problems.append(f"{name}: reads {path} without waiting for the {job} job")
    return problems


CHECKERS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "exposure": exposure_problems,
    "secrets": secret_problems,
    "grafana": grafana_problems,
    "encryption": encryption_problems,
    "generator": generator_problems,
}
