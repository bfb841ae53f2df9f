"""Both prompts as golden strings, byte for byte (spec §1 and §4)."""

from wildtrace.core.prompts import answer_prompt, judge_prompt, prompts_sha256
from wildtrace.core.tasks import RubricItem

GOLDEN_ANSWER = (
    "Answer using ONLY the document below. Include every specific detail from the text.\n"
    "\n"
    "Question: Why did the pump fail?\n"
    "\n"
    "Document:\n"
    "Line one.\nLine {two} with ${braces}."
)

GOLDEN_JUDGE = (
    "STRICT grader. Only award points for SPECIFIC details present.\n"
    "QUESTION: Why did the pump fail?\n"
    "RUBRIC:\n"
    "P1 (30pts): Names the worn seal\n"
    "P2 (12.5pts): Gives the time 03:14\n"
    "P3 (57.5pts): Says {the operator} ignored the alarm\n"
    "RESPONSE:\n"
    "The seal was worn.\n"
    'Reply JSON: {"points_awarded":[<pts>],"total":<sum>}'
)


def test_answer_prompt_golden():
    assert answer_prompt("Why did the pump fail?", "Line one.\nLine {two} with ${braces}.") == GOLDEN_ANSWER


def test_answer_prompt_keeps_document_exactly():
    document = "\ufeffBOM, CRLF\r\nand trailing spaces   \n\n"
    assert answer_prompt("q", document).endswith("Document:\n" + document)


def test_judge_prompt_golden():
    rubric = [
        RubricItem(30, "Names the worn seal"),
        RubricItem(12.5, "Gives the time 03:14"),
        RubricItem(57.5, "Says {the operator} ignored the alarm"),
    ]
    assert judge_prompt("Why did the pump fail?", rubric, "The seal was worn.") == GOLDEN_JUDGE


def test_judge_prompt_truncates_question_criterion_and_response():
    question = "Q" * 600 + "CUT"
    criterion = "C" * 260 + "CUT"
    response = "R" * 5000 + "CUT"
    prompt = judge_prompt(question, [RubricItem(100, criterion)], response)
    assert prompt == (
        "STRICT grader. Only award points for SPECIFIC details present.\n"
        f"QUESTION: {'Q' * 600}\n"
        "RUBRIC:\n"
        f"P1 (100pts): {'C' * 260}\n"
        "RESPONSE:\n"
        f"{'R' * 5000}\n"
        'Reply JSON: {"points_awarded":[<pts>],"total":<sum>}'
    )
    assert "CUT" not in prompt


def test_judge_prompt_truncates_by_characters_not_bytes():
    prompt = judge_prompt("问" * 601, [RubricItem(100, "准" * 261)], "答" * 5001)
    assert "问" * 600 + "\n" in prompt and "问" * 601 not in prompt
    assert "准" * 260 + "\n" in prompt and "准" * 261 not in prompt
    assert "答" * 5000 + "\n" in prompt and "答" * 5001 not in prompt


def test_points_print_as_the_data_has_them():
    prompt = judge_prompt("q", [RubricItem(30, "a"), RubricItem(12.5, "b"), RubricItem(7.0, "c")], "r")
    assert "P1 (30pts): a\nP2 (12.5pts): b\nP3 (7.0pts): c\n" in prompt


#: The digest every run logs as ``prompts_sha256``. A change to either prompt or to a limit
#: changes it: that is a change of benchmark (bump PROMPTS_VERSION), and this pin says so.
PINNED_PROMPTS_SHA256 = "8393e956cf83a4f53fc2b35727da5a145cfc3de7917a7699524de02acfaa4719"


def test_prompts_fingerprint_is_pinned():
    assert prompts_sha256() == PINNED_PROMPTS_SHA256
