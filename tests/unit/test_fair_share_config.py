"""Fair-share settings: TENANT_WEIGHTS and TENANT_MAX_PRIORITY, in either of their forms, and
the one-line errors that name what is wrong with them."""

from __future__ import annotations

import pytest

from aiorch_runtime.config import ConfigError, load_settings


@pytest.fixture(autouse=True)
def capacity_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every worker shares the queue, so these settings come with a capacity store."""
    monkeypatch.setenv("CAPACITY_STORE_URL", "redis://127.0.0.1:6379/0")


@pytest.mark.parametrize(
    "value", ["acme=3,beta=1", " acme = 3 , beta=1, ", '{"acme": 3, "beta": 1}']
)
def test_tenant_weights_read_as_pairs_or_json(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """``acme=3,beta=1`` (spaces and a trailing comma allowed) and its JSON object give the same
    weights; a tenant not listed weighs 1."""
    monkeypatch.setenv("TENANT_WEIGHTS", value)
    settings = load_settings()
    assert settings.tenant_weights == {"acme": 3.0, "beta": 1.0}
    assert (settings.tenant_weight("acme"), settings.tenant_weight("globex")) == (3.0, 1.0)


def test_a_runs_priority_is_narrowed_by_its_tenants_most_urgent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``beta=3``, beta's run asking for priority 1 gets 3 and one asking for 4 keeps 4; a
    tenant not listed keeps what it asks; a run asking for none has none."""
    monkeypatch.setenv("TENANT_MAX_PRIORITY", "beta=3")
    settings = load_settings()
    assert settings.run_priority("beta", 1) == 3
    assert settings.run_priority("beta", 4) == 4
    assert settings.run_priority("acme", 1) == 1
    assert settings.run_priority("beta", None) is None


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("TENANT_WEIGHTS", "acme", "is not TENANT=VALUE"),
        ("TENANT_WEIGHTS", "acme=", "is not TENANT=VALUE"),
        ("TENANT_WEIGHTS", "acme=x", "weight of 'acme' must be a number, not 'x'"),
        ("TENANT_WEIGHTS", "acme=0", "weight of 'acme' must be more than 0"),
        ("TENANT_WEIGHTS", "bad tenant=1", "is not a tenant name"),
        ("TENANT_WEIGHTS", "{acme", "not valid JSON"),
        ("TENANT_MAX_PRIORITY", "acme=0", "priority of 'acme' must be 1 (most urgent) to 5"),
        ("TENANT_MAX_PRIORITY", "acme=1.5", "to 5, not '1.5'"),
    ],
)
def test_bad_fair_share_settings_are_one_line_naming_the_problem(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    """Each malformed weight or priority stops the process with one line that names the
    variable and what is wrong."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert message.startswith(f"invalid configuration: {name}=") and says in message, message
    assert "\n" not in message
