"""What clients send, decoded inside the workflow: the start input, reviews, operator requests.

Every such payload reaches the workflow undecoded (``RawValue``) and is decoded here, so no
input of any shape, encoding or size can fail the workflow task (which Temporal would retry
forever): whatever does not decode or validate raises ``InvalidRequest`` with one printable
line, and the caller fails the run, refuses the update or counts the signal.

Workflow code, passed through the sandbox.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

import workflows.errors as errors
from workflows.payloads import describe_validation_error, printable

M = TypeVar("M", bound=BaseModel)
# The operator signals' argument is optional; this stands for "sent without one".
NO_ARGUMENT: Final = RawValue(Payload())


def decoded(raw: RawValue) -> Any:
    """A client's payload, decoded (JSON values, not yet validated).

    Raises:
        errors.InvalidRequest: it does not decode: an unknown or refused encoding, invalid
            JSON or Unicode, nesting past the decoder's limit.
    """
    try:
        return workflow.payload_converter().from_payload(raw.payload)
    except ValidationError as err:
        raise errors.InvalidRequest(describe_validation_error(err)) from None
    except Exception as err:  # whatever a decoder raises, the client gets one line, no loop
        raise errors.InvalidRequest(printable(str(err) or type(err).__name__)) from None


def inbound(raw: RawValue, model: type[M]) -> M:
    """A client's payload, decoded and validated as ``model``.

    Raises:
        errors.InvalidRequest: it does not decode, or does not validate.
    """
    value = decoded(raw)
    try:
        return model.model_validate(value)
    except ValidationError as err:
        raise errors.InvalidRequest(describe_validation_error(err)) from None
