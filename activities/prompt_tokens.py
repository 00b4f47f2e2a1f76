"""A chat prompt's tokens without the provider's tokenizer: an estimate for capacity
reservations and a bound that no byte-level tokenizer exceeds, for budgets (docs/capacity.md
says why)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# ASCII characters per token of the prompt estimate: an upper bound for English prose (about 4
# with the common BPE tokenizers) and code (about 3.5). Every other character counts its UTF-8
# bytes, its worst case; docs/capacity.md says why.
ASCII_CHARS_PER_TOKEN = 3

TOKENS_PER_MESSAGE = 4  # the chat format's role and separators

REPLY_PRIMING_TOKENS = 3  # the tokens that open the reply

_ASCII = bytes(range(128))


@dataclass(frozen=True)
class PromptTokens:
    """A chat prompt's tokens without the provider's tokenizer: ``estimate`` (what a capacity
    reservation takes) and ``bound`` (no byte-level tokenizer makes more: what budgets hold
    against)."""

    estimate: int
    bound: int


def prompt_tokens(messages: Sequence[Any]) -> PromptTokens:
    """The estimate and the bound of a chat prompt's tokens.

    The bound is the UTF-8 bytes: every token of a byte-level BPE tokenizer (OpenAI's, Llama 3's,
    Mistral's) or of a SentencePiece one with byte fallback covers at least one byte, so no text
    in any script takes more. The estimate counts ASCII at ``ASCII_CHARS_PER_TOKEN`` characters
    per token and every other character at its bytes (CJK 3, emoji 4).
    """
    estimate = bound = REPLY_PRIMING_TOKENS
    for message in messages:
        content = message.get("content", "") if isinstance(message, dict) else ""
        data = str(content).encode("utf-8", "surrogatepass")
        other = len(data.translate(None, _ASCII))
        ascii_tokens = math.ceil((len(data) - other) / ASCII_CHARS_PER_TOKEN)
        estimate += TOKENS_PER_MESSAGE + ascii_tokens + other
        bound += TOKENS_PER_MESSAGE + len(data)
    return PromptTokens(estimate=estimate, bound=bound)
