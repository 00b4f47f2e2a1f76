"""The configuration reference, ``docs/configuration.md``, and ``.env.example``, both generated
from the settings: each field's description and `SettingDoc` (``aiorch_runtime.config``), and
the variables the libraries read themselves (`OUTSIDE_VARIABLES`).

`aiorch.devstack.docs` writes them with the other generated documents, and its staleness check
covers them; `undocumented_fields` names the fields the reference cannot describe.
"""

from __future__ import annotations

import json
import re
import textwrap
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from aiorch_runtime.config import Settings
from aiorch_runtime.config_docs import OUTSIDE_VARIABLES, Section, SettingDoc
from aiorch_runtime.config_sources import FILE_BACKED_FIELDS

GENERATED_NOTE = (
    "Generated from the settings in `aiorch_runtime/config/` by `make graph`; do not edit."
)
_KIB = 1024
_MIB = 1024 * 1024


@dataclass(frozen=True)
class Entry:
    """One setting as the reference lists it."""

    variable: str
    file_variable: str | None
    secret: bool
    section: Section
    default: str
    description: str
    env_line: str


def file_companions() -> frozenset[str]:
    """The ``<name>_file`` fields: each the file form of a setting, described by its row."""
    return frozenset(f"{name}_file" for name in FILE_BACKED_FIELDS)


def setting_doc(field: FieldInfo) -> SettingDoc | None:
    """The field's `SettingDoc`, if it has one."""
    return next((item for item in field.metadata if isinstance(item, SettingDoc)), None)


def undocumented_fields(settings: type[Settings] = Settings) -> list[str]:
    """Fields of ``settings`` without a description or a `SettingDoc` (file companions
    aside)."""
    return [
        name
        for name, field in settings.model_fields.items()
        if name not in file_companions() and (not field.description or not setting_doc(field))
    ]


def is_secret(field: FieldInfo) -> bool:
    """True for a `SecretStr` setting (masked in reprs, logs and errors)."""
    return SecretStr in (field.annotation, *typing.get_args(field.annotation))


def env_value(value: Any) -> str | None:
    """A default as a variable would hold it; None when it is unset (None or empty)."""
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None or (isinstance(value, list | dict) and not value):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(to_jsonable_python(value))
    return str(value)


def _unit(name: str, number: float) -> str:
    """A large duration or size in the unit a reader counts in, or ``""``."""
    if name.endswith("_s") and number >= 600:
        if number % 3600 == 0:
            return f" ({int(number // 3600)} h)"
        if number % 60 == 0:
            return f" ({int(number // 60)} min)"
    if name.endswith("_bytes"):
        if number % _MIB == 0:
            return f" ({int(number // _MIB)} MiB)"
        if number % _KIB == 0:
            return f" ({int(number // _KIB)} KiB)"
    return ""


def shown_default(name: str, value: Any, doc: SettingDoc) -> str:
    """The default as the reference shows it (Markdown)."""
    if doc.default is not None:
        return doc.default
    text = env_value(value)
    if text is None:
        return "unset"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return text + _unit(name, value)
    return f"`{text}`"


def _entry(name: str, field: FieldInfo, doc: SettingDoc) -> Entry:
    variable = name.upper()
    default = field.get_default(call_default_factory=True)
    value = env_value(default)
    if value is None and doc.example is None:
        raise ValueError(f"setting {name!r} is unset by default and has no example")
    return Entry(
        variable=variable,
        file_variable=f"{variable}_FILE" if name in FILE_BACKED_FIELDS else None,
        secret=is_secret(field),
        section=doc.section,
        default=shown_default(name, default, doc),
        description=field.description or "",
        env_line=f"{variable}={value}" if value is not None else f"# {variable}={doc.example}",
    )


def entries(settings: type[Settings] = Settings) -> list[Entry]:
    """Every setting of ``settings`` read from a variable of its own, in the order the class
    declares them.

    Raises:
        ValueError: a field lacks its description or `SettingDoc`, or an example it needs.
    """
    listed = []
    for name, field in settings.model_fields.items():
        if name in file_companions():
            continue
        doc = setting_doc(field)
        if doc is None or not field.description:
            raise ValueError(f"setting {name!r} has no description or SettingDoc")
        if doc.own_variable:
            listed.append(_entry(name, field, doc))
    return listed


def anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _variable_cell(entry: Entry) -> str:
    names = f"`{entry.variable}`"
    return f"{names} / `{entry.file_variable}`" if entry.file_variable else names


INTRO = """\
Every setting is an environment variable, read once when a process starts
(`aiorch_runtime/config/`, the only code that reads the environment). The defaults suit the
local stack, and `make dev` sets the few it needs itself (its addresses and reviewer keys), so
nothing needs setting to try the project; production sets the addresses and the secrets. An
invalid value stops the process with one line that names the variable.

- **No `.env` file is read.** Export the variables, or hand a file of them to whatever starts the
  process (`docker run --env-file`, compose's `env_file`, a Kubernetes ConfigMap).
  [`.env.example`](../.env.example) lists every variable with its default, generated from the
  same source as this page.
- **Secrets** are masked in reprs, logs and error lines. Each may come from a file instead:
  `NAME_FILE` names a file that holds the value of `NAME` (Docker and Kubernetes secrets);
  setting both is an error, and an empty `NAME_FILE` counts as unset. The reviewer and requester
  public keys have a file form too.
- **Temporal's own variables**: the connection is read the way the Temporal CLI reads it
  (`temporalio.envconfig`), from a profile file with the `TEMPORAL_*` variables over it. The ones
  the settings do not hold themselves (TLS, gRPC headers) are listed after the
  [Temporal connection](#temporal-connection) table, as are the variables the `openai` client,
  boto3 and the OpenTelemetry SDK read themselves after their sections' tables.
- Lists are comma-separated; maps are JSON. Durations (`_S`) are in seconds, sizes in bytes,
  costs in US dollars."""


def _section_lines(section: Section, listed: list[Entry]) -> Iterator[str]:
    yield f"## {section.title}"
    yield ""
    yield textwrap.fill(section.about, width=100, break_long_words=False, break_on_hyphens=False)
    yield ""
    yield "| variable | default | meaning |"
    yield "| --- | --- | --- |"
    for entry in listed:
        meaning = ("**Secret.** " if entry.secret else "") + entry.description
        yield f"| {_variable_cell(entry)} | {_cell(entry.default)} | {_cell(meaning)} |"
    outside = [variable for variable in OUTSIDE_VARIABLES if variable.section is section]
    for reader in dict.fromkeys(variable.reader for variable in outside):
        yield ""
        yield f"Read by {reader} itself:"
        yield ""
        yield "| variable | default | meaning |"
        yield "| --- | --- | --- |"
        for variable in outside:
            if variable.reader == reader:
                yield (
                    f"| `{variable.name}` | {_cell(variable.default)} | "
                    f"{_cell(variable.description)} |"
                )
    yield ""


def configuration_page(settings: type[Settings] = Settings) -> str:
    """``docs/configuration.md``: the intro, a contents list, then each section's table."""
    listed = entries(settings)
    lines = [
        "# Configuration",
        "",
        f"<!-- {GENERATED_NOTE} -->",
        "",
        INTRO,
        "",
        " · ".join(f"[{section.title}](#{anchor(section.title)})" for section in Section),
        "",
    ]
    for section in Section:
        lines.extend(_section_lines(section, [e for e in listed if e.section is section]))
    return "\n".join(lines)


def env_example(settings: type[Settings] = Settings) -> str:
    """``.env.example``: each section's variables, those unset by default commented out."""
    listed = entries(settings)
    lines = [
        "# Every variable ai-orchestrator reads, with its default; commented out: unset by",
        "# default (an example value). docs/configuration.md says what each one does.",
        "# Nothing reads this file itself: export what you change, or hand a copy to what",
        "# starts the process (docker run --env-file, compose's env_file); values are literal.",
        f"# {GENERATED_NOTE.replace('`', '')}",
    ]
    for section in Section:
        lines += ["", f"# {section.title}"]
        for entry in listed:
            if entry.section is not section:
                continue
            lines.append(entry.env_line)
            if entry.file_variable:
                secret_name = entry.file_variable.removesuffix("_FILE").lower().replace("_", "-")
                lines.append(f"# {entry.file_variable}=/run/secrets/{secret_name}")
        outside = [variable for variable in OUTSIDE_VARIABLES if variable.section is section]
        for reader in dict.fromkeys(variable.reader for variable in outside):
            lines.append(f"# Read by {reader.replace('`', '')} itself:")
            lines += [f"# {v.env_example}" for v in outside if v.reader == reader]
    return "\n".join(lines) + "\n"


def configuration_documents(root: Path) -> dict[Path, str]:
    """The generated configuration files under the checkout ``root``."""
    return {
        root / "docs" / "configuration.md": configuration_page(),
        root / ".env.example": env_example(),
    }
