"""How ``aiorch start`` turns its arguments into a pipeline's request, for any registered
pipeline: ``--input JSON`` gives the request's own fields (a pipeline file's run: its
``input``); the positional message or ``--file`` fill the field the pipeline's
``RequestShape`` names (stored first when the pipeline stores files, or when the message is
large: the claim check), and ``--schema`` its schema field. Nothing here names a pipeline.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aiorch.cli.output import CliError
from aiorch.ops import claim_check, pipelines
from aiorch_runtime.config import Settings
from workflows.data.json_schemas import input_problems
from workflows.engine.pipeline import Pipeline
from workflows.payloads import REFERENCE_SCHEMES, RequestBase, ReviewMode, describe_validation_error

# The fields the command line sets from its own options, never from --input.
CLI_FIELDS = ("request_id", "review", "metadata", "options", "tenant")


def new_request_id() -> str:
    """A fresh request id (24 lowercase hex characters)."""
    return uuid.uuid4().hex[:24]


@dataclass(frozen=True)
class Content:
    """What the run is about, as given: the positional ``message``, ``--file``, ``--schema``,
    ``--input``."""

    message: str | None = None
    file: Path | None = None
    schema: str | None = None
    data_input: str | None = None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CliError(f"--input is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise CliError("--input must be a JSON object")
    return value


def data_input_of(pipeline: str, text: str | None) -> dict[str, Any]:
    """A pipeline file's input from ``--input`` (a JSON object), checked against the input
    schema of the pipeline's file as it is now (the worker checks it again against the
    version the run starts with).

    Raises:
        CliError: no input, not a JSON object, or one the file's input schema refuses.
    """
    if text is None:
        raise CliError(f"{pipeline} is a pipeline file's: give its input with --input JSON")
    value = _json_object(text)
    record = pipelines.record_of(pipeline)
    if record is not None and (shown := input_problems(record.spec.input, value)):
        raise CliError(f"invalid input for {pipeline} {record.label}: {shown}")
    return value


def input_fields(pipeline: Pipeline[Any, Any], content: Content) -> dict[str, Any]:
    """The request's own fields from ``--input`` (a pipeline file's run: its ``input``).

    Raises:
        CliError: a message, --file or --schema besides it, not a JSON object, a field the
            command line sets from its own options, or (a pipeline file's) an input its
            schema refuses.
    """
    if content.message is not None or content.file is not None or content.schema is not None:
        raise CliError("--input JSON gives the whole request: no message, --file or --schema")
    if pipelines.is_data(pipeline):
        return {"input": data_input_of(pipeline.name, content.data_input)}
    assert content.data_input is not None
    fields = _json_object(content.data_input)
    if taken := [name for name in CLI_FIELDS if name in fields]:
        raise CliError(f"--input may not set {', '.join(taken)}: use the command's options")
    return fields


def message_fields(
    pipeline: Pipeline[Any, Any], content: Content, settings: Settings, request_id: str
) -> tuple[dict[str, Any], str | None]:
    """The request's fields from the message or ``--file`` and ``--schema``, as the
    pipeline's ``shape`` maps them, and a note when the content was stored.

    Raises:
        CliError: the pipeline takes --input only, or no schema; or as
            ``claim_check.resolve_message``.
    """
    shape = pipeline.shape
    if shape.message_field is None:
        raise CliError(f"{pipeline.name} takes its request with --input JSON")
    if content.schema is not None and shape.schema_field is None:
        raise CliError(f"--schema is not for the {pipeline.name} pipeline")
    message, file = content.message, content.file
    # A document is a file to store, unless it is already a reference.
    is_path = message is not None and not message.startswith(REFERENCE_SCHEMES)
    if shape.stores_files and file is None and message is not None and is_path:
        file, message = Path(message), None
    value, stored = claim_check.resolve_message(
        settings, request_id, message, file, pdf=shape.stores_files
    )
    fields: dict[str, Any] = {shape.message_field: value}
    if content.schema is not None and shape.schema_field is not None:
        fields[shape.schema_field] = content.schema
    return fields, stored


def request_fields(
    pipeline: Pipeline[Any, Any], content: Content, settings: Settings, request_id: str
) -> tuple[dict[str, Any], str | None]:
    """The request's own fields from ``--input`` or from the message (``aiorch.cli.requests``),
    and a note when the content was stored.

    Raises:
        CliError: as `input_fields` and `message_fields`.
    """
    if pipelines.is_data(pipeline) or content.data_input is not None:
        return input_fields(pipeline, content), None
    return message_fields(pipeline, content, settings, request_id)


def build_request(
    fields: dict[str, Any],
    request_id: str | None,
    review: ReviewMode,
    metadata: str | None,
    options: dict[str, Any],
    tenant: str | None = None,
    *,
    pipeline: str = pipelines.DEFAULT_PIPELINE,
) -> RequestBase:
    """The request as ``pipeline``'s contract has it: its own ``fields`` and what the command
    line's options set, validated here so a bad one never starts.

    Raises:
        CliError: invalid metadata JSON or an invalid request; one line says which field.
    """
    try:
        meta = json.loads(metadata) if metadata else {}
    except json.JSONDecodeError as error:
        raise CliError(f"--metadata is not valid JSON: {error}") from None
    raw: dict[str, Any] = {
        **fields,
        "request_id": request_id or new_request_id(),
        "review": review,
        "metadata": meta,
        "options": {k: v for k, v in options.items() if v is not None},
    }
    if tenant is not None:
        raw["tenant"] = tenant
    try:
        request: RequestBase = pipelines.named(pipeline).request.model_validate(raw)
    except ValidationError as error:
        raise CliError(f"invalid request: {describe_validation_error(error)}") from None
    return request
