"""What an embeddings request asks for and what it answers: its inputs, and one unit vector
per input (floats, or base64 float32 as the ``openai`` client asks for by default)."""

from __future__ import annotations

import base64
import struct
from typing import Any

from aiorch.devstack.llm_simulator.faults import InvalidRequestError
from aiorch.devstack.llm_simulator.replies import embed, word_count


def embedding_inputs(body: dict[str, Any]) -> list[str]:
    """The texts an embeddings request asks vectors for."""
    value = body.get("input")
    inputs = [value] if isinstance(value, str) else value
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise InvalidRequestError("'input' must be a string or a non-empty list of strings")
    return inputs


def embedding_result(
    model: str, body: dict[str, Any], texts: list[str], default_dim: int
) -> dict[str, Any]:
    """The answer to an embeddings request for ``texts`` (``default_dim`` unless it asks for
    ``dimensions``)."""
    dim = body.get("dimensions", default_dim)
    if not isinstance(dim, int) or not 1 <= dim <= 8192:
        raise InvalidRequestError("'dimensions' must be an integer from 1 to 8192")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise InvalidRequestError("'encoding_format' must be 'float' or 'base64'")
    data = []
    for index, text in enumerate(texts):
        vector: list[float] | str = embed(text, dim)
        if encoding == "base64":  # the openai client asks for base64 float32 by default
            vector = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": vector})
    tokens = word_count(texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}
