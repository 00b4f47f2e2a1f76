"""docs/simulator.md, the users' page on the LLM simulator's fault directives, stays in step
with the parser: it names every directive and option, and every directive it shows parses."""

from __future__ import annotations

import re

from aiorch.devstack.docs import ROOT
from aiorch.devstack.llm_simulator.faults import DIRECTIVES, FaultSpec, parse_directives

PAGE = (ROOT / "docs" / "simulator.md").read_text(encoding="utf-8")


def section(name: str) -> str:
    return PAGE.split(f"<!-- {name}:begin", 1)[1].split(f"<!-- {name}:end -->", 1)[0]


def test_every_directive_is_documented() -> None:
    """Each directive name the simulator parses has a row of its own in the page's table."""
    rows = re.findall(r"^\| `\[sim:([a-z_]+)", section("directives"), re.MULTILINE)
    assert sorted(set(rows)) == sorted(DIRECTIVES)


def test_every_option_is_documented() -> None:
    """Each ``key=value`` option a directive takes has a row of its own."""
    rows = re.findall(r"^\| `([a-z_]+)=", section("options"), re.MULTILINE)
    assert sorted(rows) == sorted(set(FaultSpec.model_fields) - {"status"})


def test_every_directive_shown_parses() -> None:
    """Every ``[sim:...]`` example on the page (tables, commands, prose) is one the simulator
    accepts, placeholders filled in."""
    filled = {"CODE": "503", "SECONDS": "2", "MS": "100", "N": "2", "NAME": "sim-large"}
    examples = re.findall(r"\[sim:[^\]]*\]", PAGE)
    assert len(examples) >= len(DIRECTIVES)
    for example in examples:
        text = re.sub(r"\b[A-Z]+\b", lambda m: filled.get(m[0], m[0]), example)
        parse_directives([text])
