"""What the inbox reads of a run's request (its start input): a short summary for the list,
and the JSON Schema its fields are corrected against.

Both come from the run's registered pipeline, never from naming one: the summary is the field
its request shape takes the message in (``RequestShape.message_field``; a stored file shows as
its file name), else the input's first string; the schema is the one of the shape's
``schemas`` that the request names in its ``schema_field``. A run whose request cannot be read
has neither (its form then follows the fields' own values).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from temporalio.client import Client
from temporalio.service import RPCError

from aiorch.ops import pipelines
from aiorch.ops.dead_runs import NotRedrivable, RedriveError, run_request
from workflows.engine.pipeline import Pipeline
from workflows.payloads import RequestBase

log = logging.getLogger("ai-orchestrator.inbox")

_CACHE_SIZE: Final = 2048
_REFERENCE_SCHEMES: Final = ("s3://", "file://")


def summary(pipeline: Pipeline[Any, Any], request: RequestBase) -> str | None:
    """What the run works on, in a few words: its message (a stored file's name), else the
    first string of its input."""
    field = pipeline.shape.message_field
    value = getattr(request, field, None) if field is not None else None
    if isinstance(value, str) and value.strip():
        return file_name(value) if value.startswith(_REFERENCE_SCHEMES) else value.strip()
    own = request.model_dump(mode="json", exclude=set(RequestBase.model_fields))
    return first_string(own)


def file_name(reference: str) -> str:
    """The last part of a stored document's reference (``s3://bucket/inputs/x/a.pdf``:
    ``a.pdf``)."""
    path = unquote(urlsplit(reference).path).rstrip("/")
    return path.rsplit("/", 1)[-1] or reference


def first_string(value: Any) -> str | None:
    """The first non-blank string in ``value``, depth first, in its order."""
    if isinstance(value, str):
        return value.strip() or None
    children = value.values() if isinstance(value, Mapping) else value
    if isinstance(value, Mapping | list | tuple):
        for child in children:
            if (found := first_string(child)) is not None:
                return found
    return None


def fields_schema(pipeline: Pipeline[Any, Any], request: RequestBase) -> dict[str, Any] | None:
    """The JSON Schema a run's fields follow: the one of its pipeline's schemas its request
    names (None: it names none)."""
    shape = pipeline.shape
    name = getattr(request, shape.schema_field, None) if shape.schema_field is not None else None
    schema = shape.schemas.get(name) if isinstance(name, str) else None
    return schema.json_schema() if schema is not None else None


class RequestReader:
    """Reads runs' requests through one client, each run's once (a request never changes)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._cache: OrderedDict[str, tuple[Pipeline[Any, Any], RequestBase] | None] = OrderedDict()

    async def request(
        self, workflow_id: str, run_id: str, workflow_type: str
    ) -> tuple[Pipeline[Any, Any], RequestBase] | None:
        """The run's pipeline and request (None: no pipeline here runs it, or its request
        cannot be read now)."""
        if run_id in self._cache:
            return self._cache[run_id]
        pipeline = pipelines.of_type(workflow_type)
        if pipeline is None:
            return None
        found: tuple[Pipeline[Any, Any], RequestBase] | None = None
        try:
            found = (pipeline, await run_request(self._client, workflow_id, run_id, pipeline))
        except (NotRedrivable, RedriveError) as err:
            log.info("the request of %s cannot be read: %s", workflow_id, err)
        except RPCError as err:
            log.info("the request of %s cannot be read now: %s", workflow_id, err.status)
            return None  # not kept: Temporal may answer next time
        self._cache[run_id] = found
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return found
