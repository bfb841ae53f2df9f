"""The extractive baseline: BM25 over the document's sentences, answering with the best.

A real (if weak) baseline for long-document QA: it never reasons, it only retrieves, so
its score says how much of a rubric plain lexical retrieval can reach.
"""

from __future__ import annotations

import math
from collections import Counter

from wildtrace.core.prompts import ANSWER_HEAD, ANSWER_MIDDLE
from wildtrace.offline.text import sentences, tokens

K1, B = 1.5, 0.75
#: The answer is the best sentences up to this many characters, in document order.
ANSWER_CHARS = 1500


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


def extractive_answer(question: str, document: str, budget: int = ANSWER_CHARS) -> str:
    """The highest-scoring sentences (ties: earlier first) up to ``budget`` chars, in document order."""
    sents = sentences(document)
    scores = bm25_scores(tokens(question), [tokens(s) for s in sents])
    ranked = sorted(range(len(sents)), key=lambda i: (-scores[i], i))
    chosen, used = [], 0
    for i in ranked:
        if scores[i] <= 0 or (chosen and used + len(sents[i]) > budget):
            break
        chosen.append(i)
        used += len(sents[i]) + 1
    return " ".join(sents[i] for i in sorted(chosen))


def answer_from_prompt(prompt: str) -> str:
    """What the baseline replies to an answer prompt."""
    question, document = split_answer_prompt(prompt)
    return extractive_answer(question, document)
