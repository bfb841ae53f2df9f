"""Judge replies: the one total a reply's grades agree on, in every shape judges use."""

import pytest

from wildtrace.core.judging import panel_mean, parse_judge_reply


@pytest.mark.parametrize(
    "reply, total, score",
    [
        ('{"points_awarded":[30,20],"total":50}', 50.0, 0.5),
        ('```json\n{"points_awarded": [40], "total": 40}\n```', 40.0, 0.4),
        ('Looking at the rubric, P1 is met.\n{"points_awarded":[30],"total":30}\nThat is my grade.', 30.0, 0.3),
        ('{"total": 20} as I said: {"points_awarded":[20],"total":20}', 20.0, 0.2),  # grades that agree
        ('{"total": 150}', 150.0, 1.0),  # above 100 caps at 1.0
        ('{"total": -20}', -20.0, 0.0),  # never below 0
        ('{"total": 0}', 0.0, 0.0),
        ('{"total": 100}', 100.0, 1.0),
        ('{"total": 12.5}', 12.5, 0.125),
        ('{"grade": {"points_awarded":[5], "total": 5}}', 5.0, 0.05),  # nested object with the total
        ('{"total": 60, "note": "x"} trailing {"not": "a grade"}', 60.0, 0.6),  # later object lacks total
        ('{"total": "80"} {"total": 70}', 70.0, 0.7),  # a string total is not numeric
    ],
)
def test_reads_total(reply, total, score):
    verdict = parse_judge_reply(reply)
    assert verdict.available
    assert verdict.total == total
    assert verdict.score == pytest.approx(score)
    assert verdict.reason is None


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("", "empty_reply"),
        ("   \n", "empty_reply"),
        (None, "empty_reply"),
        ("I award 50 points.", "no_numeric_total"),
        ('{"points_awarded":[30,20]}', "no_numeric_total"),
        ('{"total": "50"}', "no_numeric_total"),
        ('{"total": true}', "no_numeric_total"),
        ('{"total": null}', "no_numeric_total"),
        ('{"total": NaN}', "no_numeric_total"),
        ('{"total": 50', "no_numeric_total"),  # truncated JSON
        # Grades that disagree are not guessed at: a self-correction too.
        ('{"total": 10} on reflection: {"points_awarded":[20],"total":20}', "ambiguous_total"),
    ],
)
def test_unavailable_never_zero(reply, reason):
    verdict = parse_judge_reply(reply)
    assert not verdict.available
    assert verdict.score is None
    assert verdict.reason == reason


@pytest.mark.parametrize(
    "scores, mean",
    [([0.5, 0.7, 0.9], 0.7), ([0.5, None, 0.9], 0.7), ([None, None, 0.2], 0.2), ([None, None], None), ([], None)],
)
def test_panel_mean_uses_available_judges(scores, mean):
    result = panel_mean(scores)
    assert (result is None and mean is None) or result == pytest.approx(mean)


# --------------------------------------------------------------------------------------
# Hostile replies: bounded, linear, never raising
# --------------------------------------------------------------------------------------

import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import re._parser as re_parser  # noqa: E402 - CPython's own pattern parser (3.11+), to inspect a pattern's shape
import sys  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from types import FrameType  # noqa: E402

from wildtrace.core import judging, jsonsafe  # noqa: E402
from wildtrace.core.judging import MAX_REPLY_CHARS, graded_objects, outermost  # noqa: E402

BIG_INT = "9" * 10_000
GRADE = '{"points_awarded": [30], "total": 30}'

HOSTILE = [
    # (id, reply, total read or None for unavailable)
    ("1MB of {", "{" * 1_000_000, None),
    ("1MB of { then a grade", "{" * 1_000_000 + GRADE, 30.0),
    ('{"a": repeated', '{"a":' * 100_000, None),
    ('{"a": repeated then a grade', '{"a":' * 30_000 + GRADE, 30.0),
    ("[ nested 100k deep", "[" * 100_000, None),
    ("[ nested 100k deep inside an object", '{"total": 5, "x": ' + "[" * 100_000, None),
    ("a grade nested 100k deep, closed", '{"total": 5, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", None),
    ("a grade nested 150 deep, closed", '{"total": 5, "x": ' + "[" * 150 + "]" * 150 + "}", 5.0),
    ("total 1e400", '{"total": 1e400}', None),
    ("total -1e400", '{"total": -1e400}', None),
    ("total a 10000-digit int", '{"total": ' + BIG_INT + "}", None),
    ("10000-digit int beside the total", '{"n": ' + BIG_INT + ', "total": 40}', 40.0),
    ("total NaN", '{"total": NaN}', None),
    ("total Infinity", '{"total": Infinity}', None),
    ("total -Infinity", '{"total": -Infinity}', None),
    ("NaN elsewhere, total fine", '{"note": NaN, "total": 20}', 20.0),
    ("unterminated string", '{"total": 50, "note": "abc', None),
    ("unterminated string after a grade", GRADE + ' {"note": "abc', 30.0),
    ("lone surrogate escape", '{"note": "\\ud800", "total": 60}', 60.0),
    ("raw lone surrogate", '{"note": "\ud800x", "total": 61}', 61.0),
    ("control character in a string", '{"note": "a\x01b", "total": 62}', None),
    ("invalid escape", '{"note": "\\x41", "total": 63}', None),
    ("fullwidth digits", '{"total": \uff15\uff10}', None),
    ("duplicate total, last not numeric", '{"total": 5, "total": "x"}', None),
    ("duplicate total, last numeric", '{"total": "x", "total": 7}', 7.0),
    ("stray quote in prose", 'I\'d say " then {"total": 45}', 45.0),
    ("grade quoted inside a string", '{"note": "{\\"total\\": 99}"}', None),
    ("bool total", '{"total": false}', None),
]


@pytest.mark.parametrize(("reply", "total"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE])
def test_hostile_replies(reply, total):
    # Bounded and linear, counted (a clock fails on a busy machine): at most 20 steps a character
    # read, and only the last MAX_REPLY_CHARS are read; quadratic would be billions on the 1 MB cases.
    assert parser_steps(reply) <= 20 * min(len(reply), MAX_REPLY_CHARS) + 2_000
    verdict = parse_judge_reply(reply)
    if total is None:
        assert not verdict.available and verdict.reason == "no_numeric_total" and verdict.parsed is None
    else:
        assert verdict.available and verdict.total == total and verdict.reason is None
        assert isinstance(verdict.parsed, dict) and verdict.parsed["total"] == total
        json.dumps(verdict.parsed, ensure_ascii=False, allow_nan=False).encode("utf-8")  # writable as is


def test_parsed_object_is_clean_for_writing():
    verdict = parse_judge_reply('{"note": NaN, "big": ' + BIG_INT + ', "s": "\\udc00", "total": 20}')
    assert verdict.parsed == {"note": None, "big": None, "s": "\ufffd", "total": 20}


def test_non_text_reply_is_empty():
    assert parse_judge_reply(b'{"total": 5}').reason == "empty_reply"  # type: ignore[arg-type]


def test_only_the_tail_is_read():
    filler = "x" * MAX_REPLY_CHARS
    assert parse_judge_reply(GRADE + filler).reason == "no_numeric_total"  # the grade is before the bound
    assert parse_judge_reply(filler + GRADE).total == 30.0
    # An object cut by the bound is not read; a later one is.
    cut = '{"total": 10, "pad": "' + "y" * MAX_REPLY_CHARS + '"}'
    assert parse_judge_reply(cut).reason == "no_numeric_total"
    assert parse_judge_reply(cut + ' {"total": 11}').total == 11.0


def test_a_total_nested_in_a_grade_is_part_of_it_and_grades_that_disagree_are_ambiguous():
    text = 'prose {"a": 1, "grade": {"total": 20}} then {"total": 20, "inner": {"total": 30}}'
    assert [t for _, _, t in sorted(graded_objects(text))] == [20.0, 20.0, 30.0]
    assert [t for _, _, t in outermost(graded_objects(text))] == [20.0, 20.0]  # the 30 is inside a grade
    assert parse_judge_reply(text).total == 20.0
    assert parse_judge_reply(text.replace('"grade": {"total": 20}', '"grade": {"total": 10}')).reason \
        == "ambiguous_total"


LINEAR_UNITS = ["{", '{"a":', '{"a":"{"', '"{"', '{"total":1,', '{"a":[', '{"x":1}{', '{"total": 5} ', "[" * 3 + "{"]


class _CountedPattern:
    """A compiled pattern of the parser's that adds the characters each search passes over to ``steps``.

    The parser's patterns have no alternation to backtrack into: a search costs the span it
    passes over, so counting spans counts the regex engine's work without a clock.
    """

    def __init__(self, pattern: re.Pattern, steps: list[int]) -> None:
        self.pattern, self.steps = pattern, steps

    def match(self, text: str, pos: int = 0) -> re.Match | None:
        found = self.pattern.match(text, pos)
        self.steps[0] += (found.end() - pos if found else 0) + 1
        return found

    def fullmatch(self, text: str) -> re.Match | None:
        self.steps[0] += len(text) + 1
        return self.pattern.fullmatch(text)

    def finditer(self, text: str) -> Iterator[re.Match]:
        cursor = 0
        for found in self.pattern.finditer(text):
            self.steps[0] += found.end() - cursor + 1
            cursor = found.end()
            yield found
        self.steps[0] += len(text) - cursor + 1


def parser_steps(reply: str) -> int:
    """The work ``parse_judge_reply`` does on ``reply``, counted, not timed (a busy machine moves times):
    each line of the parser's own code run, plus each character its C primitives pass over (its
    regular expressions and json's string scanner, the only calls whose cost grows with the text)."""
    steps = [0]
    parser_files = {judging.__file__, jsonsafe.__file__}
    scanstring = json.decoder.scanstring  # type: ignore[attr-defined]

    def counted_scanstring(text: str, end: int, strict: bool = True) -> tuple[str, int]:
        try:
            value, stop = scanstring(text, end, strict)
        except json.JSONDecodeError as exc:
            steps[0] += exc.pos - end + 1
            raise
        steps[0] += stop - end
        return value, stop

    def line(frame: FrameType, event: str, arg: object) -> Callable:
        if event == "line":
            steps[0] += 1
        return line

    def call(frame: FrameType, event: str, arg: object) -> Callable | None:
        return line if frame.f_code.co_filename in parser_files else None

    with pytest.MonkeyPatch.context() as patch:
        for name in ("_WS", "_NUMBER", "_CANDIDATE"):
            patch.setattr(judging, name, _CountedPattern(getattr(judging, name), steps))
        patch.setattr(json.decoder, "scanstring", counted_scanstring)
        previous = sys.gettrace()
        sys.settrace(call)
        try:
            parse_judge_reply(reply)
        finally:
            sys.settrace(previous)
    return steps[0]


@pytest.mark.parametrize("unit", LINEAR_UNITS)
def test_parsing_work_is_linear(unit):
    def steps(size: int) -> int:
        return parser_steps((unit * (size // len(unit) + 1))[:size])

    small, large = steps(4_000), steps(16_000)
    assert small > 4_000 // len(unit)  # the count sees the work: at least a step per unit of the reply
    assert large <= 4.5 * small, (small, large)  # 4x the size: 4x the work; quadratic would be ~16x


def _backtracking(tree: list, inside_unbounded: bool = False) -> str | None:
    """What in a parsed pattern can make a search cost more than its span, or None.

    Lookarounds and backreferences re-read the text; an unbounded repeat inside another can
    try every split of a run. The parser's patterns have none, which is what lets
    ``_CountedPattern`` count a search as its span.
    """
    for op, arg in tree:
        name = str(op)
        if name in ("ASSERT", "ASSERT_NOT") or name.startswith("GROUPREF"):
            return name
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            unbounded = arg[1] == re_parser.MAXREPEAT
            if unbounded and inside_unbounded:
                return "an unbounded repeat inside another"
            found = _backtracking(arg[2], inside_unbounded or unbounded)
        elif name == "SUBPATTERN":
            found = _backtracking(arg[-1], inside_unbounded)
        elif name == "BRANCH":
            found = next(filter(None, (_backtracking(b, inside_unbounded) for b in arg[1])), None)
        else:
            found = None
        if found:
            return found
    return None


@pytest.mark.parametrize("name", ["_WS", "_NUMBER", "_CANDIDATE"])
def test_parser_patterns_cannot_backtrack(name):
    pattern = getattr(judging, name)
    assert _backtracking(re_parser.parse(pattern.pattern, pattern.flags)) is None, pattern.pattern


@pytest.mark.parametrize(("pattern", "found"), [
    (r"\{(?=.*\Z)", "ASSERT"), (r"(?!x)a", "ASSERT_NOT"), (r"(a)\1", "GROUPREF"),
    (r"(?:a+)*b", "an unbounded repeat inside another"), (r"(?:[0-9]+)?x", None)])
def test_the_backtracking_check_sees_what_backtracks(pattern, found):
    assert _backtracking(re_parser.parse(pattern)) == found


# --------------------------------------------------------------------------------------
# Strict JSON at the boundary (core/jsonsafe.py)
# --------------------------------------------------------------------------------------

DEEP_OK = "[" * jsonsafe.MAX_DEPTH + "]" * jsonsafe.MAX_DEPTH
DEEP_BAD = "[" * (jsonsafe.MAX_DEPTH + 1) + "]" * (jsonsafe.MAX_DEPTH + 1)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"a": 1}', {"a": 1}),
        ('{"a": 1.5}', {"a": 1.5}),
        (b"NaN", None),
        (b"[NaN, Infinity, -Infinity, 1]", [None, None, None, 1]),
        (b'{"x": 1e999, "y": -1e999, "z": 1e308}', {"x": None, "y": None, "z": 1e308}),
        (("[" + "9" * 5000 + "]").encode(), [None]),
        (("[-" + "9" * 5000 + "]").encode(), [None]),
        (("[" + "9" * 4000 + "]").encode(), [int("9" * 4000)]),
        ('"\\ud800"', "\ufffd"),
        ('{"\\udfff": ["\\ud83d\\ude00", "\\ud83d"]}', {"\ufffd": ["\U0001F600", "\ufffd"]}),
        ("\ufeff[1]".encode(), [1]),
        (DEEP_OK, json.loads(DEEP_OK)),
    ],
    ids=["bytes", "str", "bare NaN", "constants", "overflow floats", "huge int", "huge negative int",
         "long int kept", "lone surrogate", "surrogates in keys and lists", "utf-8 BOM", "deep at the bound"],
)
def test_loads_accepts(data, expected):
    assert jsonsafe.loads(data) == expected


@pytest.mark.parametrize(
    "data",
    [b"\xff\xfe", b'{"a": "\xc3"}', DEEP_BAD, "[" * 100_000 + "]" * 100_000, "[" * 100_000, b"", b"{", b"[1,]",
     '{"a": 1} x', 12, None],
    ids=["invalid utf-8", "truncated utf-8", "deeper than the bound", "100k deep", "100k unclosed", "empty",
         "truncated", "trailing comma", "trailing garbage", "not text", "None"],
)
def test_loads_raises_only_value_error(data):
    with pytest.raises(ValueError):
        jsonsafe.loads(data)


@pytest.mark.parametrize(
    ("value", "expected", "paths"),
    [
        ({"a": 1.0, "b": "x"}, {"a": 1.0, "b": "x"}, []),
        (float("nan"), None, ["$"]),
        ({"usage": {"cost": float("inf")}, "items": [1, float("-inf"), {"k": float("nan")}]},
         {"usage": {"cost": None}, "items": [1, None, {"k": None}]},
         ["$.usage.cost", "$.items[1]", "$.items[2].k"]),
        ({"odd key": float("nan"), "t": (1.0, float("nan"))}, {"odd key": None, "t": [1.0, None]},
         ['$["odd key"]', "$.t[1]"]),
    ],
)
def test_sanitize(value, expected, paths):
    clean, replaced = jsonsafe.sanitize(value)
    assert clean == expected
    assert sorted(replaced) == sorted(paths)
    json.dumps(clean, allow_nan=False)


def test_sanitize_copies_and_survives_depth_and_cycles():
    original = {"x": [float("nan")]}
    clean, _ = jsonsafe.sanitize(original)
    assert math.isnan(original["x"][0]) and clean == {"x": [None]}  # the input is untouched
    deep: list = []
    node = deep
    for _ in range(50_000):
        node.append([])
        node = node[0]
    node.append(float("inf"))
    _, replaced = jsonsafe.sanitize(deep)  # no RecursionError
    assert len(replaced) == 1 and replaced[0].endswith("[0][0]")
    cyclic: dict = {"v": float("nan")}
    cyclic["self"] = cyclic
    clean, replaced = jsonsafe.sanitize(cyclic)
    assert clean["self"] is clean and replaced == ["$.v"]
