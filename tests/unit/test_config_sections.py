"""The settings are grouped by the sections of the configuration reference: every field is
declared in exactly one frozen section model, `Settings` is made of all of them (each field a
flat attribute of the whole), and `Settings.section` hands one section out alone."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from aiorch.devstack.config_page import file_companions, setting_doc
from aiorch_runtime.config import (
    SECTIONS,
    BudgetSettings,
    ConfigError,
    InboxSettings,
    InputSettings,
    LlmSettings,
    PayloadProtectionSettings,
    Settings,
    SettingsSection,
    load_settings,
)
from aiorch_runtime.config_docs import Section
from aiorch_runtime.config_sources import FILE_BACKED_FIELDS


def test_every_field_belongs_to_exactly_one_section() -> None:
    """Each field of the whole is declared in one section and one only, and no section holds a
    field the whole lacks: the sections partition the settings."""
    owners = Counter(name for section in SECTIONS for name in section.model_fields)
    assert set(owners) == set(Settings.model_fields)
    assert [name for name, count in owners.items() if count != 1] == []


def test_the_sections_are_the_reference_sections_in_order() -> None:
    """There is one section model per `Section` of the reference, in its order, and `Settings`
    inherits exactly these."""
    assert [section.SECTION for section in SECTIONS] == list(Section)
    bases = {base for base in Settings.__bases__ if issubclass(base, SettingsSection)}
    assert bases == set(SECTIONS)


def test_a_file_form_sits_in_the_section_of_its_setting() -> None:
    """Each ``<name>_FILE`` field is declared beside the setting it holds the value of, so a
    section handed out carries both."""
    apart = [
        name
        for name in FILE_BACKED_FIELDS
        if not any({name, f"{name}_file"} <= set(section.model_fields) for section in SECTIONS)
    ]
    assert apart == []


@pytest.mark.parametrize("section", SECTIONS, ids=lambda section: section.__name__)
def test_a_section_lists_its_fields_in_its_own_section(section: type[SettingsSection]) -> None:
    """Every documented field of a section model names that model's `Section` in its
    `SettingDoc`, so the reference lists it where the code declares it (file forms aside)."""
    misplaced = {
        name: doc.section
        for name, field in section.model_fields.items()
        if name not in file_companions()
        and (doc := setting_doc(field)) is not None
        and doc.section is not section.SECTION
    }
    assert misplaced == {}


@pytest.mark.parametrize("section", SECTIONS, ids=lambda section: section.__name__)
def test_a_handed_out_section_equals_the_fields_of_the_whole(
    section: type[SettingsSection], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``settings.section(X)`` is an ``X`` whose every field equals the whole's, read from the
    same environment."""
    monkeypatch.setenv("LLM_MODEL", "gpt-x")
    monkeypatch.setenv("INBOX_URL", "https://review.example.com/")
    monkeypatch.setenv("TENANT_BUDGETS_USD", '{"acme": 5}')
    monkeypatch.setenv("CAPACITY_STORE_URL", "redis://store:6379/0")
    settings = load_settings()
    group = settings.section(section)
    assert type(group) is section
    assert {name: getattr(group, name) for name in section.model_fields} == {
        name: getattr(settings, name) for name in section.model_fields
    }


def test_a_handed_out_section_is_frozen() -> None:
    """A section handed out cannot be changed, like the whole it came from."""
    llm = Settings().section(LlmSettings)
    with pytest.raises(ValidationError, match="frozen"):
        llm.llm_model = "other"  # type: ignore[misc]


def test_a_handed_out_section_carries_its_derived_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """The values a section derives from its fields read the same on the section alone as on
    the whole: a tenant's budget, whether notifications are on, where inputs may come from."""
    monkeypatch.setenv("TENANT_BUDGETS_USD", '{"acme": 5}')
    monkeypatch.setenv("TENANT_BUDGET_DEFAULT_USD", "2")
    monkeypatch.setenv("CAPACITY_STORE_URL", "redis://store:6379/0")
    monkeypatch.setenv("REVIEW_WEBHOOK_URL", "https://hooks.example.com/x")
    monkeypatch.setenv("CLAIM_CHECK_DIR", "/shared/claims")
    settings = load_settings()
    budgets = settings.section(BudgetSettings)
    assert budgets.tenant_budgeted and settings.tenant_budgeted
    assert budgets.tenant_budget("acme") == settings.tenant_budget("acme") == 5
    assert budgets.tenant_budget("default") == settings.tenant_budget("default") == 2
    assert settings.section(InboxSettings).notifications_enabled
    inputs = settings.section(InputSettings)
    assert inputs.allowed_file_roots == settings.allowed_file_roots == [Path("/shared/claims")]


def test_only_a_section_of_the_settings_is_handed_out() -> None:
    """Asking for a model that is not one of the sections is refused with a clear error."""

    class Elsewhere(SettingsSection):
        SECTION = Section.WORKER

    with pytest.raises(TypeError, match="Elsewhere is not a section of the settings"):
        Settings().section(Elsewhere)


def test_a_section_alone_takes_the_defaults_of_the_whole() -> None:
    """A section built with no arguments (as a test or a component builds its group) has the
    defaults the whole has for those fields."""
    for section in SECTIONS:
        alone = section()
        for name in section.model_fields:
            expected = Settings.model_fields[name].get_default(call_default_factory=True)
            got = getattr(alone, name)
            if isinstance(expected, SecretStr):
                expected, got = expected.get_secret_value(), got.get_secret_value()
            assert got == expected, name


def test_a_section_alone_validates_as_the_whole_does() -> None:
    """A section's checks travel with it: a bad value, or two values that do not go together,
    fail the section alone with the message the whole gives."""
    with pytest.raises(ValidationError, match="must be an http:// or https:// URL"):
        InboxSettings(inbox_url="ftp://inbox")
    with pytest.raises(ConfigError, match="REQUIRE_ENCRYPTION=true needs PAYLOAD_KEYS"):
        PayloadProtectionSettings(require_encryption=True)
    with pytest.raises(ConfigError, match="they need CAPACITY_STORE_URL"):
        BudgetSettings(tenant_budgets_usd={"acme": 1.0})
    with pytest.raises(ValidationError, match="unknown_setting"):
        LlmSettings(unknown_setting=1)  # type: ignore[call-arg]


def test_a_check_across_sections_stays_on_the_whole() -> None:
    """The batch lane needs the capacity store, a field of another section: the whole refuses
    the pair, and the LLM section alone, which cannot see the store, accepts its half."""
    with pytest.raises(ConfigError, match="LLM_BATCH and LLM_RESULT_CACHE_TTL_S"):
        Settings(llm_batch="allowed")
    assert LlmSettings(llm_batch="allowed").batch_enabled


def test_no_two_sections_define_a_member_of_the_same_name() -> None:
    """`Settings` inherits every section, so a validator or method two sections name alike
    would silently replace the other's (a list setting would then no longer be split): each
    member a section defines is its own."""
    inherited = {"SECTION", "model_config", "model_fields", "model_computed_fields"}
    owners = Counter(
        name
        for section in SECTIONS
        for name in vars(section)
        if not (name.startswith("__") and name.endswith("__"))
        and not name.startswith(("__pydantic", "_abc_"))
        and name not in inherited
    )
    assert [name for name, count in owners.items() if count > 1] == []


def test_pipeline_modules_are_read_as_a_comma_separated_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``PIPELINE_MODULES=a.b, c`` names two modules, as every list setting is read."""
    monkeypatch.setenv("PIPELINE_MODULES", "acme.greeter, acme.translate")
    monkeypatch.setenv("REVIEW_AUTH", "off")
    assert Settings().pipeline_modules == ["acme.greeter", "acme.translate"]
