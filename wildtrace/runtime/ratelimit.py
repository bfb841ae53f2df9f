"""STUB until the robust branch lands."""
from __future__ import annotations
from collections.abc import Mapping


def estimate_tokens(prompt_chars: int, cjk: bool) -> int:
    return int(prompt_chars / (1.5 if cjk else 3.3))


class AdaptiveLimit:
    def __init__(self, max_concurrency: int) -> None:
        self.limit = max_concurrency

    async def acquire(self, cost_tokens: int) -> None:
        return None

    def release(self, status: int | None, headers: Mapping[str, str]) -> None:
        return None
