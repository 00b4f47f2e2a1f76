"""Pipeline files the tests share: the support-triage example as it ships (version 1), and its
version 2 (another prompt and one more step), written into a test's pipeline folder."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support import ROOT

TRIAGE = "SupportTriage"
TRIAGE_V1 = (ROOT / "pipelines" / "support_triage.yaml").read_text(encoding="utf-8")
# Version 2: the classify prompt asks differently, and a check of the reply follows its review.
V2_PROMPT = "Which category fits this support ticket best (v2)?"
TRIAGE_V2 = (
    TRIAGE_V1.replace("version: 1", "version: 2")
    .replace("Sort this support ticket into exactly one category:", V2_PROMPT)
    .replace(
        "  - id: store\n",
        "  - id: check_reply\n"
        "    type: validate\n"
        "    of: draft\n"
        "    rules:\n"
        "      - {field: content, required: true, min_length: 1}\n"
        "  - id: store\n",
    )
)
assert TRIAGE_V2.count("check_reply") == 1 and V2_PROMPT in TRIAGE_V2


def write_pipeline(folder: Path, text: str, name: str = "support_triage.yaml") -> Path:
    """Write ``text`` as the pipeline file ``name`` in ``folder`` the way an operator should:
    whole, then renamed into place, so a worker never reads half a file."""
    target = folder / name
    temporary = folder / f".{name}.tmp"
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)
    return target
