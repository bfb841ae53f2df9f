"""The extractive baselines: BM25 over the document's sentences, answering with the best.

A real (if weak) baseline for long-document QA: it never reasons, it only retrieves, so
its score says how much of a rubric plain lexical retrieval can reach. Two of them, so a
leaderboard has rows to rank offline: ``extractive`` answers with the best sentences up to
ANSWER_CHARS, ``extractive-brief`` up to BRIEF_CHARS (it retrieves as well and says less,
so a rubric's later items are more often missed). Like a model, each
stops at its completion budget: an answer longer than ``max_tokens`` (counted as the
cost estimate counts them, ``core.caps.tokens_of``) is cut there, finish reason ``length``.
"""

from __future__ import annotations

import math
import random
from collections import Counter

from wildtrace.core.caps import chars_within, count_ideographs, is_cjk
from wildtrace.core.prompts import ANSWER_HEAD, ANSWER_MIDDLE
from wildtrace.offline.text import sentences, tokens

K1, B = 1.5, 0.75
#: The answer is the best sentences up to this many characters, in document order (the brief baseline's: BRIEF_CHARS).
ANSWER_CHARS, BRIEF_CHARS = 1500, 500
#: At or below this temperature the baseline answers greedily: the spec decodes at 0.1,
#: and keeping that setting deterministic keeps the default run's headline what it was.
GREEDY_MAX_TEMPERATURE = 0.1
#: The finish reasons of a whole answer and of one the budget cut (OpenAI's words).
STOP, LENGTH = "stop", "length"


def split_answer_prompt(prompt: str) -> tuple[str, str]:
    """Recover (question, document) from the spec's answer prompt."""
    if not prompt.startswith(ANSWER_HEAD) or ANSWER_MIDDLE not in prompt:
        raise ValueError("not a WildTrace answer prompt")
    question, document = prompt[len(ANSWER_HEAD) :].split(ANSWER_MIDDLE, 1)
    return question, document


def bm25_scores(query: list[str], docs: list[list[str]]) -> list[float]:
    """Okapi BM25 of ``query`` against each tokenised ``doc``."""
    n = len(docs)
    if n == 0:
        return []
    avg_len = sum(len(d) for d in docs) / n or 1.0
    df = Counter(term for d in docs for term in set(d))
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in set(query)}
    scores = []
    for d in docs:
        tf = Counter(d)
        norm = K1 * (1 - B + B * len(d) / avg_len)
        scores.append(sum(idf[t] * tf[t] * (K1 + 1) / (tf[t] + norm) for t in set(query) if tf[t]))
    return scores


def sampled_keys(scores: list[float], temperature: float, rng: random.Random) -> list[float]:
    """Gumbel-perturbed scores: ranking by them samples sentences without replacement from
    softmax(score / (temperature · best score)), so a higher temperature reaches further down."""
    scale = temperature * max(scores, default=0.0)
    if scale <= 0:
        return list(scores)
    # -log(-log(u)) is a standard Gumbel draw; u is kept away from 0 so log stays finite.
    return [s / scale - math.log(-math.log(max(rng.random(), 1e-300))) if s > 0 else s for s in scores]


def extractive_answer(question: str, document: str, budget: int = ANSWER_CHARS, temperature: float | None = None,
                      rng: random.Random | None = None) -> str:
    """The highest-ranked sentences (ties: earlier first) up to ``budget`` chars, in document order.

    Above GREEDY_MAX_TEMPERATURE (and given an ``rng``) the ranking is sampled (see
    ``sampled_keys``); only sentences sharing a term with the question are ever chosen.
    """
    sents = sentences(document)
    scores = bm25_scores(tokens(question), [tokens(s) for s in sents])
    keys = scores
    if rng is not None and temperature is not None and temperature > GREEDY_MAX_TEMPERATURE:
        keys = sampled_keys(scores, temperature, rng)
    ranked = sorted(range(len(sents)), key=lambda i: (-keys[i], i))
    chosen: list[int] = []
    used = 0
    for i in ranked:
        if scores[i] <= 0 or (chosen and used + len(sents[i]) > budget):
            break
        chosen.append(i)
        used += len(sents[i]) + 1
    return " ".join(sents[i] for i in sorted(chosen))


def within_budget(answer: str, max_tokens: int | None, cjk: bool) -> tuple[str, str]:
    """(text, finish reason): the answer whole (``stop``), or its first ``max_tokens`` tokens (``length``).

    ``cjk``: the document's script by the spec's rule, as the estimate counts it.
    """
    if max_tokens is None:
        return answer, STOP
    limit = chars_within(max_tokens, cjk)
    return (answer, STOP) if len(answer) <= limit else (answer[:limit], LENGTH)


def answer_from_prompt(prompt: str, temperature: float | None = None, rng: random.Random | None = None,
                       max_tokens: int | None = None, chars: int = ANSWER_CHARS) -> tuple[str, str]:
    """(reply text, finish reason) of the baseline answering in up to ``chars`` characters to an
    answer prompt (sampled above GREEDY_MAX_TEMPERATURE, cut at ``max_tokens``)."""
    question, document = split_answer_prompt(prompt)
    answer = extractive_answer(question, document, budget=chars, temperature=temperature, rng=rng)
    return within_budget(answer, max_tokens, is_cjk(count_ideographs(document)))
