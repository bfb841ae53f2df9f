"""Tokenising and sentence splitting shared by the offline baseline and judge."""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_IDEOGRAPHS = re.compile(r"[\u4e00-\u9fff]+")
# An English stop ends a sentence only before white space (so "10.2 bar" and "no. 19"
# followed by a digit stay whole); a CJK stop ends one at once; a blank line always does.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'”’)])\s+|"
                           r"(?<=[。！？])(?![”’」』])|(?<=[。！？][”’」』])|\n\s*\n")

STOPWORDS = frozenset(
    [
        "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be",
        "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do",
        "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having",
        "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it",
        "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on",
        "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so",
        "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these",
        "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what",
        "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours",
        "yourself", "yourselves", "answer", "must", "mention", "mentions", "state", "states", "include", "includes",
        "including", "response", "specific", "detail", "details", "text", "document", "exact", "exactly", "identify",
        "identifies", "explain", "explains", "also", "one", "two",
    ]
)


def tokens(text: str) -> list[str]:
    """Lower-cased English words (minus stopwords) and CJK ideograph bigrams.

    Chinese has no spaces; overlapping bigrams are the usual cheap stand-in for words.
    """
    lowered = text.lower()
    out = [w for w in _WORD.findall(lowered) if w not in STOPWORDS and len(w) > 1]
    for run in _IDEOGRAPHS.findall(text):
        out.extend(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return out


def sentences(document: str) -> list[str]:
    """Split into sentences on . ! ? 。！？ and blank lines, dropping empty pieces."""
    return [s.strip() for s in _SENTENCE_END.split(document) if s and s.strip()]
