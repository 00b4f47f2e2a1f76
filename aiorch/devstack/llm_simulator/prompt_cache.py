"""The simulator's prompt cache, shaped like OpenAI's: a prompt's prefix the simulator has seen
before is reported as cached tokens (``usage.prompt_tokens_details.cached_tokens``).

Tokens are the simulator's (whitespace-separated words, in message order). A prompt is cut into
blocks of ``BLOCK`` tokens, each named by a digest of every token up to its end, so a block
matches only after the same prefix; the cached tokens are the whole leading blocks seen before,
and none below ``MIN_TOKENS`` (OpenAI caches prompts from 1,024 tokens, in steps of 128). Each
model has its own cache, and the oldest blocks are forgotten past ``capacity``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable
from typing import Final

BLOCK: Final = 128
MIN_TOKENS: Final = 1024


class PromptCache:
    """The prefixes seen, per model (see the module docstring)."""

    def __init__(self, capacity: int = 500_000) -> None:
        self._seen: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._capacity = capacity

    def cached(self, model: str, texts: Iterable[str]) -> int:
        """How many of this prompt's tokens were cached; remembers its prefix for later."""
        words = [word for text in texts for word in text.split()]
        digest = hashlib.sha256()
        blocks = []
        for end in range(BLOCK, len(words) + 1, BLOCK):
            digest.update((" ".join(words[end - BLOCK : end]) + "\n").encode())
            blocks.append((model, digest.copy().digest()))
        hits = 0
        for block in blocks:
            if block not in self._seen:
                break
            hits += 1
        for block in blocks:
            self._seen[block] = None
            self._seen.move_to_end(block)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        cached = hits * BLOCK
        return cached if cached >= MIN_TOKENS else 0

    def clear(self) -> None:
        """Forget every prefix."""
        self._seen.clear()
