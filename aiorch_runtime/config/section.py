"""The base of every settings section, and the value checks several sections share.

A section is a frozen model of the settings one `Section` of the configuration reference
lists; `aiorch_runtime.config.Settings` inherits every section, so each field is read from its
own variable and stays a flat attribute of the whole.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from aiorch_runtime.config_docs import Section


class SettingsSection(BaseModel):
    """The settings of one `Section`, frozen; `SECTION` names the section its fields are
    listed in (each field's `SettingDoc` names the same one, which a test checks)."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    SECTION: ClassVar[Section]


def decode_json(value: Any) -> Any:
    """A variable's JSON text as its value, so a value that is not JSON is reported like any
    invalid value (the fields it decodes are ``NoDecode``)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err.msg} at position {err.pos})") from None


def listen_address(value: str) -> str:
    """An address a server listens on: an IP, since the SDK's Prometheus endpoint takes an
    address, not a name."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError("must be an IP address to listen on (127.0.0.1, 0.0.0.0, ::)") from None
    return value
