"""Reasoning, both ways: what a reasoning-effort level sends per wire format, and how
reasoning text is told apart from the answer. Pure; the tables live in base.py."""

from __future__ import annotations

import re
from typing import Any

from wildtrace.providers.base import CLAUDE_XHIGH, THINKING_BUDGETS

_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
#: Claude model names from 4.6 on take adaptive thinking (Opus 4.7+ take nothing else).
_CLAUDE = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:[-.](\d{1,2}))?(?!\d)")
#: Gemini 1.x/2.x take a thinking budget; 3.x and later a thinking level.
_GEMINI_BUDGET = re.compile(r"gemini-[12](?:[.-]|$)")


def split_think(content: str | None) -> tuple[str | None, str | None]:
    """(reasoning, answer) from OpenAI-compatible content with inline ``<think>`` reasoning.

    A LEADING ``<think>…</think>`` block (after white space) is reasoning; the answer is
    what follows, leading white space dropped. An unclosed leading ``<think>`` means the
    model stopped while still thinking: all of it is reasoning and the answer is "" (an
    empty answer, recorded and never judged). A ``</think>`` with no opening tag (chat
    templates that put ``<think>`` in the prompt) ends reasoning the same way. A
    ``<think>`` later in the text is the answer's own text and is left alone.
    """
    if not content:
        return None, content
    body = content.lstrip()
    if body.startswith(_THINK_OPEN):
        inner = body[len(_THINK_OPEN):]
        end = inner.find(_THINK_CLOSE)
        if end < 0:
            return inner.strip(), ""
        return inner[:end].strip(), inner[end + len(_THINK_CLOSE):].lstrip()
    end = content.find(_THINK_CLOSE)
    if end >= 0 and _THINK_OPEN not in content[:end]:
        return content[:end].strip(), content[end + len(_THINK_CLOSE):].lstrip()
    return None, content


def join_reasoning(*pieces: str | None) -> str | None:
    """Reasoning texts from several places, blank-line separated; None when there is none."""
    kept = [p for p in pieces if p]
    return "\n\n".join(kept) if kept else None


def anthropic_format(route: str) -> str:
    """The Anthropic format a route takes by default: adaptive from Claude 4.6 on, else a budget."""
    match = _CLAUDE.search(route)
    if match is None:
        return "anthropic-budget"
    version = (int(match.group(1)), int(match.group(2) or 0))
    return "anthropic-adaptive" if version >= (4, 6) else "anthropic-budget"


def gemini_format(route: str) -> str:
    """The Gemini format a route takes by default: a budget for 1.x/2.x, a level for 3.x on."""
    return "gemini-budget" if _GEMINI_BUDGET.search(route) else "gemini-level"


def thinking_budget(level: str, max_tokens: int, floor: int) -> int:
    """Tokens a level may think: its table entry, at most half the output budget (the answer
    keeps the other half), never under the format's floor."""
    return max(floor, min(THINKING_BUDGETS[level], max_tokens // 2))


def openai_fields(fmt: str, level: str, max_tokens: int) -> dict[str, Any]:
    """Body fields an OpenAI-compatible dialect reads for a level (merged before extra_body)."""
    enabled = level != "none"
    toggle = {"thinking": {"type": "enabled" if enabled else "disabled"}}
    if fmt == "openai":
        return {"reasoning_effort": level}
    if fmt == "openrouter":
        return {"reasoning": {"effort": level}}
    if fmt == "qwen":
        if not enabled:
            return {"enable_thinking": False}
        return {"enable_thinking": True, "thinking_budget": THINKING_BUDGETS[level]}
    if fmt == "thinking":
        return toggle
    if fmt == "deepseek":
        return {**toggle, "reasoning_effort": level} if enabled else toggle
    if fmt == "doubao":  # Ark takes minimal..high
        return {**toggle, "reasoning_effort": "high" if level == "xhigh" else level} if enabled else toggle
    if fmt == "minimax":
        return {"reasoning_split": True} if enabled else {"reasoning_split": True, "thinking": {"type": "disabled"}}
    return {}


def anthropic_fields(fmt: str, level: str, max_tokens: int, route: str = "") -> dict[str, Any]:
    """Body fields for a level on the Messages API; none sends no thinking (the API's default).

    ``xhigh`` is Opus 4.7+'s own effort (between high and max: vercel.com/ai-gateway/models/
    claude-opus-4.7, Anthropic's "What's new in Claude Opus 4.7"); earlier adaptive models top out at max."""
    if level == "none" or fmt == "none":
        return {}
    if fmt == "anthropic-adaptive":
        top = "xhigh" if CLAUDE_XHIGH.search(route.lower()) else "max"
        effort = {"minimal": "low", "xhigh": top}.get(level, level)
        return {"thinking": {"type": "adaptive"}, "output_config": {"effort": effort}}
    budget = thinking_budget(level, max_tokens, 1024)
    if budget >= max_tokens:
        raise ValueError(f"reasoning_effort={level!r} needs max_tokens > 1024 on Anthropic "
                         f"(budget_tokens must be >= 1024 and below max_tokens={max_tokens})")
    return {"thinking": {"type": "enabled", "budget_tokens": budget}}


def gemini_thinking_config(fmt: str, level: str, max_tokens: int) -> dict[str, Any] | None:
    """``generationConfig.thinkingConfig`` for a level; None for format ``none``."""
    if fmt == "none":
        return None
    if fmt == "gemini-budget":
        if level == "none":
            return {"thinkingBudget": 0}
        return {"thinkingBudget": thinking_budget(level, max_tokens, 128), "includeThoughts": True}
    if level == "none":  # Gemini 3 cannot switch thinking off; minimal is the least there is
        return {"thinkingLevel": "minimal"}
    return {"thinkingLevel": "high" if level == "xhigh" else level, "includeThoughts": True}
