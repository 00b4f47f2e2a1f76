"""The import contracts (pyproject.toml, [tool.importlinter]) hold for the tree, and each one
breaks, by name, when a forbidden import is added to a copy of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = [
    contract["name"]
    for contract in tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "importlinter"
    ]["contracts"]
]


def copy_of_the_tree(target: Path) -> Path:
    """The product's packages and pyproject.toml, copied without caches."""
    for package in ("workflows", "activities", "aiorch_runtime", "aiorch"):
        shutil.copytree(
            ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    return target


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``tree``, its packages found there before the installed checkout."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_contract_is_kept() -> None:
    """The tree as it is keeps every contract."""
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in done.stdout


# One forbidden import per contract, in the order pyproject.toml lists the contracts.
FORBIDDEN = [
    ("workflows/engine/backoff.py", "import boto3"),
    ("workflows/engine/graph.py", "import workflows.llm.graph"),
    ("aiorch_runtime/aws.py", "import activities.heartbeat"),
    ("aiorch/worker/app.py", "import aiorch.cli.output"),
]
# Imports that run back up the house, each of which alone breaks its layers contract.
UPWARD = [
    ("aiorch_runtime/aws.py", "import aiorch.ops.visibility"),
    ("activities/pricing.py", "from aiorch.ops import visibility"),
    ("aiorch/ops/durations.py", "import aiorch.cli.output"),
    ("aiorch/cli/keys.py", "import aiorch.devstack.processes"),
]

# Imports between pipelines (pipelines defined as data are one of them), each of which alone
# breaks the workflows' layers contract.
BETWEEN_PIPELINES = [
    ("workflows/data/steps.py", "import workflows.documents.pipeline"),
    ("workflows/data/pipeline.py", "import workflows.llm.steps"),
    ("workflows/documents/pipeline.py", "import workflows.data.steps"),
]


def test_a_forbidden_import_breaks_its_contract(tmp_path: Path) -> None:
    """A copy of the tree with one forbidden import per contract fails the check: every
    contract is reported broken, each naming the module whose import breaks it."""
    assert len(FORBIDDEN) == len(CONTRACTS)
    tree = copy_of_the_tree(tmp_path)
    for module, forbidden_import in FORBIDDEN:
        path = tree / module
        source = path.read_text(encoding="utf-8")
        path.write_text(f"{source}\n{forbidden_import}\n", encoding="utf-8")
    done = lint_imports(tree)
    assert done.returncode != 0
    assert f"Contracts: 0 kept, {len(CONTRACTS)} broken." in done.stdout
    broken = " ".join(done.stdout.split("Broken contracts", 1)[1].split())  # unwrapped
    starts = [broken.index(name) for name in CONTRACTS]
    assert starts == sorted(starts)
    for (module, _), start, end in zip(FORBIDDEN, starts, [*starts[1:], None], strict=True):
        dotted = module.removesuffix(".py").replace("/", ".")
        assert f"{dotted} -> " in broken[start:end]


@pytest.mark.parametrize(("module", "upward_import"), UPWARD)
def test_an_import_up_the_house_breaks_the_layers(
    tmp_path: Path, module: str, upward_import: str
) -> None:
    """One import from a lower layer of the product to a higher one, alone, breaks the layers
    contract and names the importing module."""
    tree = copy_of_the_tree(tmp_path)
    path = tree / module
    path.write_text(f"{path.read_text(encoding='utf-8')}\n{upward_import}\n", encoding="utf-8")
    done = lint_imports(tree)
    assert done.returncode != 0
    assert f"Contracts: {len(CONTRACTS) - 1} kept, 1 broken." in done.stdout
    broken = " ".join(done.stdout.split("Broken contracts", 1)[1].split())
    assert "the house, top to bottom" in broken
    assert module.removesuffix(".py").replace("/", ".") + " -> " in broken


@pytest.mark.parametrize(("module", "sibling_import"), BETWEEN_PIPELINES)
def test_a_pipeline_importing_another_breaks_the_workflow_layers(
    tmp_path: Path, module: str, sibling_import: str
) -> None:
    """Pipelines are siblings: one importing another (the data pipelines included, whose
    shared steps live in ``workflows.steps``) alone breaks the workflows' layers contract."""
    tree = copy_of_the_tree(tmp_path)
    path = tree / module
    path.write_text(f"{path.read_text(encoding='utf-8')}\n{sibling_import}\n", encoding="utf-8")
    done = lint_imports(tree)
    assert done.returncode != 0
    assert f"Contracts: {len(CONTRACTS) - 1} kept, 1 broken." in done.stdout
    broken = " ".join(done.stdout.split("Broken contracts", 1)[1].split())
    assert "a pipeline (or the batch lane's workflow) imports no other" in broken
    assert module.removesuffix(".py").replace("/", ".") + " -> " in broken
