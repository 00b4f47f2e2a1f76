"""The configuration reference (docs/configuration.md, .env.example) is generated from the
settings: every setting carries what the reference says about it, the checked-in files are what
the settings make, and a change to a setting shows as a stale reference."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field, SecretStr

from aiorch.devstack.config_page import (
    anchor,
    configuration_page,
    entries,
    env_example,
    file_companions,
    is_secret,
    undocumented_fields,
)
from aiorch.devstack.docs import ROOT
from aiorch_runtime.config import Settings, load_settings
from aiorch_runtime.config_docs import OUTSIDE_VARIABLES, Section, SettingDoc
from aiorch_runtime.config_sources import FILE_BACKED_FIELDS

PAGE = ROOT / "docs" / "configuration.md"
ENV_EXAMPLE = ROOT / ".env.example"


class WithNewSetting(Settings):
    """The settings as a branch that adds a documented setting leaves them."""

    tea_break_s: Annotated[float, SettingDoc(Section.WORKER)] = Field(
        default=600.0, description="How long the worker rests."
    )


class WithChangedDescription(Settings):
    """The settings with one description reworded."""

    llm_model: Annotated[str, SettingDoc(Section.LLM)] = Field(
        default="sim-large", min_length=1, description="The model a chat call tries first."
    )


def test_every_setting_has_a_description_and_a_section() -> None:
    """Each Settings field (a secret's <NAME>_FILE form aside) has a description and a
    SettingDoc naming its section."""
    assert undocumented_fields() == []


def test_a_setting_without_description_or_section_is_named() -> None:
    """A new field with neither, or with a description but no section, is reported, and the
    reference refuses to generate without it."""

    class Undocumented(Settings):
        plain: int = 3
        described: int = Field(default=4, description="Has words, no section.")

    assert undocumented_fields(Undocumented) == ["plain", "described"]
    with pytest.raises(ValueError, match="'plain' has no description"):
        configuration_page(Undocumented)


def test_a_setting_unset_by_default_needs_an_example() -> None:
    """A setting with no default value has no line for .env.example unless it names an
    example: generating refuses it."""

    class NoExample(Settings):
        webhook: Annotated[str | None, SettingDoc(Section.INBOX)] = Field(
            default=None, description="Somewhere to call."
        )

    with pytest.raises(ValueError, match="'webhook' is unset by default and has no example"):
        env_example(NoExample)


def test_a_new_setting_makes_the_checked_in_reference_stale() -> None:
    """A setting added changes both generated files, so the check that they are current
    (tests/unit/test_docs.py) fails until they are regenerated."""
    assert configuration_page(WithNewSetting) != PAGE.read_text(encoding="utf-8")
    assert env_example(WithNewSetting) != ENV_EXAMPLE.read_text(encoding="utf-8")


def test_a_reworded_description_makes_the_checked_in_page_stale() -> None:
    """A description changed in the code changes the page (which shows it) and nothing else."""
    page = configuration_page(WithChangedDescription)
    assert page != PAGE.read_text(encoding="utf-8")
    assert "| `LLM_MODEL` | `sim-large` | The model a chat call tries first. |" in page


def test_a_removed_setting_makes_the_checked_in_reference_stale() -> None:
    """The committed page has a row for every setting the class has, and only those: a
    setting removed from the class leaves a row the generator no longer makes."""
    rows = re.findall(r"^\| `([A-Z0-9_<>]+)`", PAGE.read_text(encoding="utf-8"), re.MULTILINE)
    expected = [entry.variable for entry in entries()]
    outside = [variable.name for variable in OUTSIDE_VARIABLES]
    assert sorted(rows) == sorted(expected + outside)


def test_a_new_setting_is_listed_in_its_section_with_its_default() -> None:
    """The added setting gets a row in its section's table with its default and description,
    and an active line in .env.example."""
    page = configuration_page(WithNewSetting)
    worker = page.split("## Worker", 1)[1]
    assert "| `TEA_BREAK_S` | 600 (10 min) | How long the worker rests. |" in worker
    assert "\nTEA_BREAK_S=600\n" in env_example(WithNewSetting)


def test_secrets_all_have_a_file_form_and_are_marked() -> None:
    """Every SecretStr setting may come from <NAME>_FILE, each file form is a field, and the
    reference marks the secrets (and only them) as such."""
    fields = Settings.model_fields
    secrets = {name for name, field in fields.items() if is_secret(field)}
    assert secrets <= set(FILE_BACKED_FIELDS)
    assert file_companions() <= set(fields)
    page = PAGE.read_text(encoding="utf-8")
    for entry in entries():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{entry.variable}`"))
        assert ("**Secret.**" in row) == (entry.variable.lower() in secrets), entry.variable
        assert (f"`{entry.variable}_FILE`" in row) == (entry.file_variable is not None)


def test_env_example_values_are_the_defaults_as_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every active line of .env.example, exported, loads to the setting's own default: the
    example shows each default in the form the settings read it (JSON, numbers, booleans)."""
    active = [
        line.split("=", 1)
        for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    assert len(active) > 50
    for name, value in active:
        monkeypatch.setenv(name, value)
    loaded = load_settings()
    for name, _ in active:
        field = Settings.model_fields[name.lower()]
        expected, got = field.get_default(call_default_factory=True), getattr(loaded, name.lower())
        if isinstance(expected, SecretStr):
            expected, got = expected.get_secret_value(), got.get_secret_value()
        assert got == expected, name


def _headings(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    return {anchor(heading) for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def test_every_link_of_the_page_resolves() -> None:
    """Each relative link on docs/configuration.md names a file that exists and, with a
    fragment, a heading in it (the sections it points to move, the link must follow)."""
    links = re.findall(r"\]\(([^)\s]+)\)", PAGE.read_text(encoding="utf-8"))
    assert any("#" in link for link in links)
    for link in links:
        target, _, fragment = link.partition("#")
        path = (PAGE.parent / target).resolve() if target else PAGE
        assert path.is_file(), link
        if fragment:
            assert fragment in _headings(path), link
