"""Caps and the CJK rule (spec §3), table-driven at every boundary."""

import pytest

from wildtrace.core.caps import Caps, count_ideographs, decide, decide_for_text
from wildtrace.core.records import Scope

CAPS = Caps(en=100, cjk=50)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", 0),
        ("plain English text", 0),
        ("一" * 20, 20),
        ("一" * 21, 21),
        ("\u4e00\u9fff", 2),  # both ends of the range count
        ("\u4dff\ua000", 0),  # just outside the range on either side
        ("\u3400\u3401", 0),  # CJK Extension A does not count
        ("ひらがなカタカナ한국어", 0),  # kana and hangul do not count
        ("\uf900\uf901", 0),  # compatibility ideographs do not count
        ("a" * 3999 + "一" * 30, 1),  # only the first 4000 characters are inspected
        ("a" * 4000 + "一" * 30, 0),
    ],
)
def test_count_ideographs(text, expected):
    assert count_ideographs(text) == expected


@pytest.mark.parametrize(
    "ideographs, kind, cap",
    [(0, "en", 100), (20, "en", 100), (21, "cjk", 50), (4000, "cjk", 50)],
)
def test_twenty_ideographs_is_english_twenty_one_is_cjk(ideographs, kind, cap):
    decision = decide(10, ideographs, CAPS)
    assert (decision.cap_kind, decision.cap) == (kind, cap)


@pytest.mark.parametrize(
    "chars, ideographs, scope",
    [
        (100, 0, Scope.IN_SCOPE),  # equal to the en cap: in scope
        (101, 0, Scope.OUT_OF_CONTEXT),  # one over: out
        (50, 21, Scope.IN_SCOPE),  # equal to the cjk cap
        (51, 21, Scope.OUT_OF_CONTEXT),
        (99, 21, Scope.OUT_OF_CONTEXT),  # fits the en cap but the document is CJK
        (0, 0, Scope.IN_SCOPE),
    ],
)
def test_cap_boundaries(chars, ideographs, scope):
    decision = decide(chars, ideographs, CAPS)
    assert decision.scope == scope
    assert decision.in_scope == (scope == Scope.IN_SCOPE)
    assert decision.doc_chars == chars and decision.ideographs == ideographs


def test_decide_for_text_counts_characters_not_bytes():
    text = "一" * 30 + "x" * 20  # 50 characters, 110 UTF-8 bytes
    decision = decide_for_text(text, CAPS)
    assert decision.to_dict() == {"doc_chars": 50, "ideographs": 30, "cap_kind": "cjk", "cap": 50, "scope": "in_scope"}
    assert decide_for_text(text + "y", CAPS).scope == Scope.OUT_OF_CONTEXT


def test_exactly_twenty_in_window_then_more_after_window_stays_english():
    text = "一" * 20 + "a" * 3980 + "一" * 100
    assert decide_for_text(text, Caps(en=10_000, cjk=10)).cap_kind == "en"
