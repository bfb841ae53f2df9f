"""Context caps and the CJK rule (spec §3).

The document is measured in characters (Python ``str`` length of the UTF-8 file as it
is). CJK documents get the smaller cjk cap because they pack more tokens per character.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import StrEnum

from wildtrace.core.records import Scope

#: Only the first this-many characters are inspected for ideographs.
CJK_WINDOW = 4000
#: More than this many ideographs in the window selects the cjk cap (21 does, 20 does not).
CJK_THRESHOLD = 20
#: The one range the spec counts: 一 (U+4E00) to 鿿 (U+9FFF). Extension A, compatibility
#: ideographs, kana and hangul deliberately do not count.
CJK_FIRST, CJK_LAST = "\u4e00", "\u9fff"
#: The spec's characters per token (§3), by the document's script: the one token estimate
#: (the cost estimate, the offline model's budget).
CHARS_PER_TOKEN = {"en": 3.3, "cjk": 1.5}
#: The most characters a token holds at the tokenizers the providers describe: OpenAI's "about 4
#: characters" of English, Moonshot's "3-4 English characters" and "1.5-2 Chinese characters". The
#: cost estimate's low end counts input so (fewest tokens); its high end at the spec's ratios.
CHARS_PER_TOKEN_MOST = {"en": 4.0, "cjk": 2.0}


class CapKind(StrEnum):
    """Which of the two caps applies to a document (a caps decision's ``cap_kind``)."""

    EN = "en"
    CJK = "cjk"  # more than CJK_THRESHOLD ideographs in the first CJK_WINDOW characters


@dataclass
class Caps:
    """Context caps in characters (spec §3): en, and cjk for CJK documents.

    The one caps type: the config schema's ``model.caps`` is this class (wildtrace/config/__init__.py),
    so it is a plain, mutable dataclass, as a structured config must be for overrides to apply.
    """

    #: The largest document, in characters, sent whole (spec §3's en column).
    en: int = 2_850_000
    #: The same for a CJK document: more than 20 ideographs in its first 4000 characters (the cjk column).
    cjk: int = 850_000


@dataclass(frozen=True)
class CapsDecision:
    """Everything the caps rule looked at and what it decided, recorded per task."""

    doc_chars: int
    ideographs: int
    cap_kind: CapKind
    cap: int
    scope: Scope

    @property
    def in_scope(self) -> bool:
        """True when the document fits and may be sent."""
        return self.scope == Scope.IN_SCOPE

    def to_dict(self) -> dict:
        """Plain dict for JSON rows."""
        return asdict(self)


def count_ideographs(text: str) -> int:
    """Count U+4E00–U+9FFF ideographs in the first CJK_WINDOW characters of ``text``."""
    return sum(1 for ch in text[:CJK_WINDOW] if CJK_FIRST <= ch <= CJK_LAST)


def is_cjk(ideographs: int) -> bool:
    """The spec's test: strictly more than 20 ideographs in the window."""
    return ideographs > CJK_THRESHOLD


def decide(doc_chars: int, ideographs: int, caps: Caps) -> CapsDecision:
    """Apply the cap: ``doc_chars > cap`` is out of context scope (equal is in scope).

    Takes the document's length and its ideograph count rather than the text so that the
    loader can measure a large corpus once without keeping every document in memory.
    """
    kind = CapKind.CJK if is_cjk(ideographs) else CapKind.EN
    cap = caps.cjk if kind == CapKind.CJK else caps.en
    scope = Scope.OUT_OF_CONTEXT if doc_chars > cap else Scope.IN_SCOPE
    return CapsDecision(doc_chars=doc_chars, ideographs=ideographs, cap_kind=kind, cap=cap, scope=scope)


def decide_for_text(document: str, caps: Caps) -> CapsDecision:
    """Convenience: the caps decision for a document held in memory."""
    return decide(len(document), count_ideographs(document), caps)


def tokens_of(chars: int, cjk: bool) -> int:
    """Tokens from characters at the script's ratio (rounded up)."""
    return math.ceil(max(chars, 0) / CHARS_PER_TOKEN["cjk" if cjk else "en"])


def fewest_tokens_of(chars: int, cjk: bool) -> int:
    """The fewest tokens a provider's tokenizer is documented to make of so many characters (rounded up)."""
    return math.ceil(max(chars, 0) / CHARS_PER_TOKEN_MOST["cjk" if cjk else "en"])


def chars_within(tokens: int, cjk: bool) -> int:
    """The most characters whose ``tokens_of`` is at most ``tokens`` (0 for a budget below 1)."""
    chars = max(math.floor(tokens * CHARS_PER_TOKEN["cjk" if cjk else "en"]), 0)
    while chars > 0 and tokens_of(chars, cjk) > tokens:  # float rounding of the product
        chars -= 1
    while tokens_of(chars + 1, cjk) <= tokens:
        chars += 1
    return chars
