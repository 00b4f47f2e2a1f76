"""Generated documents stay in step with the code."""

from __future__ import annotations

import subprocess
import sys

from aiorch.devstack.docs import PIPELINE_DOCS, ROOT, stale_documents
from aiorch.ops import pipelines


def test_generated_documents_are_current() -> None:
    """docs/ diagrams, schemas, the configuration reference (docs/configuration.md and
    .env.example) and the README's Mermaid block match the code (`make graph`)."""
    assert stale_documents() == []


def test_checked_in_diagrams_match_starter_graph() -> None:
    """`starter.py graph --pipeline NAME` prints exactly the checked-in DOT and Mermaid files of
    every pipeline."""
    for name, fmt, suffix in (
        (name, fmt, suffix)
        for name in pipelines.names()
        for fmt, suffix in (("dot", "dot"), ("mermaid", "mmd"))
    ):
        printed = subprocess.run(
            [sys.executable, "starter.py", "graph", "--format", fmt, "--pipeline", name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert printed == (PIPELINE_DOCS / f"{name}.{suffix}").read_text(encoding="utf-8")


def test_a_shipped_pipeline_file_s_diagrams_match_pipeline_graph() -> None:
    """`starter.py pipeline graph FILE` prints exactly the checked-in diagrams `make graph`
    draws for the pipeline files in pipelines/."""
    for fmt, suffix in (("dot", "dot"), ("mermaid", "mmd")):
        printed = subprocess.run(
            [
                sys.executable,
                "starter.py",
                "pipeline",
                "graph",
                "pipelines/support_triage.yaml",
                "--format",
                fmt,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert printed == (PIPELINE_DOCS / f"SupportTriage.{suffix}").read_text(encoding="utf-8")
