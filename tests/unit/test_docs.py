"""Generated documents stay in step with the code."""

from __future__ import annotations

import subprocess
import sys

from aiorch.devstack.docs import ROOT, stale_documents


def test_generated_documents_are_current() -> None:
    """docs/ diagrams, schemas and the README's Mermaid block match the code (`make graph`)."""
    assert stale_documents() == []


def test_checked_in_diagrams_match_starter_graph() -> None:
    """`starter.py graph` prints exactly the checked-in DOT and Mermaid files."""
    for fmt, path in (("dot", "docs/state-graph.dot"), ("mermaid", "docs/state-graph.mmd")):
        printed = subprocess.run(
            [sys.executable, "starter.py", "graph", "--format", fmt],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert printed == (ROOT / path).read_text(encoding="utf-8")
