"""The offline tour: a three-judge lexical panel and an extractive model whose temperature
matters, seeded by (replicate, request) — and the default run's headline unchanged."""

from __future__ import annotations

import json

import pytest

from conftest import settings
from wildtrace.config import package_data
from wildtrace.core.caps import chars_within, count_ideographs, is_cjk, tokens_of
from wildtrace.core.prompts import answer_prompt, judge_prompt
from wildtrace.core.tasks import RubricItem
from wildtrace.offline.extractive import BRIEF_CHARS, extractive_answer
from wildtrace.offline.text import sentences
from wildtrace.providers.base import Sampling
from wildtrace.providers.offline import OfflineProvider
from wildtrace.providers.registry import make_provider
from wildtrace.report import sources
from wildtrace.report.assemble import build
from wildtrace.runtime.store.dataset import load_dataset, read_document
from wildtrace.runtime.run.execute import run

PANEL = ("lexical-judge-lenient", "lexical-judge-balanced", "lexical-judge-strict")


def offline(route: str) -> OfflineProvider:
    from conftest import endpoint_spec

    provider = make_provider(endpoint_spec("offline", route=route, base_url="http://offline.invalid/v1"))
    assert isinstance(provider, OfflineProvider)
    return provider


@pytest.fixture(scope="module")
def sample():
    dataset = load_dataset(package_data("sample/tasks.json"), package_data("sample/corpus"))
    return [(task, read_document(dataset.documents[task.corpus_file].path)) for task in dataset.tasks]


def reply(route: str, prompt: str, temperature: float | None, replicate: int, max_tokens: int = 8192) -> str:
    return answered(route, prompt, temperature, replicate, max_tokens)[0]


def answered(route: str, prompt: str, temperature: float | None, replicate: int,
             max_tokens: int) -> tuple[str, str | None]:
    """(text, finish reason) of an offline route, through its request builder and response parser."""
    provider = offline(route)
    body = provider.build_request(prompt, Sampling(temperature, max_tokens)).body
    status, payload = provider.answer_locally(body, replicate)
    assert status == 200
    parsed = provider.parse_response(payload)
    return parsed.text, parsed.finish_reason


def test_extractive_is_greedy_up_to_the_spec_temperature(sample):
    task, doc = sample[0]
    prompt = answer_prompt(task.question_text, doc)
    greedy = extractive_answer(task.question_text, doc)
    for t in (None, 0.0, 0.1):
        assert {reply("extractive-bm25", prompt, t, r) for r in range(4)} == {greedy}


def made_of_sentences(answer: str, doc_sentences: list[str]) -> bool:
    """True when the answer is whole document sentences, in document order, joined by spaces."""
    at = 0
    for sentence in doc_sentences:
        if answer.startswith(sentence, at) and answer[at + len(sentence):at + len(sentence) + 1] in ("", " "):
            at += len(sentence) + 1
    return at == len(answer) + 1


def test_extractive_samples_above_it_seeded_by_replicate_and_request(sample):
    varied = 0
    for task, doc in sample:
        prompt = answer_prompt(task.question_text, doc)
        answers = [reply("extractive-bm25", prompt, 1.0, r) for r in range(5)]
        assert answers == [reply("extractive-bm25", prompt, 1.0, r) for r in range(5)]  # same seed, same answer
        varied += len(set(answers)) > 1
        for answer in answers:
            assert answer and made_of_sentences(answer, sentences(doc))
    assert varied >= len(sample) // 2


@pytest.mark.parametrize("temperature", [0.1, 0.7])
def test_the_brief_model_retrieves_the_same_and_says_less(sample, temperature):
    """extractive-brief answers with whole sentences of the same ranking in up to 500 characters: at
    the spec's temperature its sentences are among extractive's, and it says less wherever the
    ranking offers more than 500 characters."""
    shorter = 0
    for task, doc in sample:
        prompt = answer_prompt(task.question_text, doc)
        brief = reply("extractive-brief", prompt, temperature, 0)
        full = reply("extractive-bm25", prompt, temperature, 0)
        assert brief == extractive_answer(task.question_text, doc, budget=BRIEF_CHARS) or temperature > 0.1
        assert made_of_sentences(brief, sentences(doc)) and (len(brief) <= BRIEF_CHARS or " " not in brief.strip())
        if temperature <= 0.1:  # every document sentence the brief answer holds, the full one holds too
            assert {x for x in sentences(doc) if x in brief} <= {x for x in sentences(doc) if x in full}
        shorter += len(brief) < len(full)
    assert shorter >= len(sample) // 2


def _judge_prompts(sample) -> list[str]:
    return [judge_prompt(task.question_text, task.rubric, extractive_answer(task.question_text, doc))
            for task, doc in sample]


def _total(text: str) -> float:
    parsed = json.loads(text)
    assert set(parsed) == {"points_awarded", "total"} and parsed["total"] == sum(parsed["points_awarded"])
    return parsed["total"]


def test_panel_judges_differ_in_strictness(sample):
    prompts = _judge_prompts(sample)
    means = [sum(_total(reply(route, p, 0.0, 0)) for p in prompts) / len(prompts) for route in PANEL]
    assert means[0] > means[1] > means[2]
    default = [_total(reply("lexical-judge", p, 0.1, 0)) for p in prompts]
    assert [_total(reply("lexical-judge-balanced", p, 0.0, 0)) for p in prompts] == default


def test_panel_judges_vary_with_the_replicate_above_temperature_0(sample):
    prompts = _judge_prompts(sample)
    for route in PANEL:
        by_replicate = [[_total(reply(route, p, 0.1, r)) for p in prompts] for r in range(8)]
        assert len({tuple(v) for v in by_replicate}) > 1, route
        assert by_replicate[3] == [_total(reply(route, p, 0.1, 3)) for p in prompts]  # reproducible
        assert len({tuple(_total(reply(route, p, 0.0, r)) for p in prompts) for r in range(4)}) == 1  # t=0: none
    default = {tuple(_total(reply("lexical-judge", p, 0.1, r)) for p in prompts) for r in range(4)}
    assert len(default) == 1  # the default panel's judge stays deterministic


def test_jitter_never_awards_a_missing_item_nor_denies_a_full_match():
    rubric = [RubricItem(50, "the pump failed at dawn"), RubricItem(50, "zebra quartz violin")]
    prompt = judge_prompt("What failed?", rubric, "The pump failed at dawn.")
    for r in range(50):
        assert json.loads(reply("lexical-judge-lenient", prompt, 2.0, r))["points_awarded"] == [50, 0]


@pytest.mark.parametrize("temperature", [0.1, 0.7])
def test_extractive_stops_at_max_tokens_as_the_estimate_counts_them(sample, temperature):
    for task, doc in sample:
        prompt = answer_prompt(task.question_text, doc)
        whole, reason = answered("extractive-bm25", prompt, temperature, 1, 32768)
        assert reason == "stop"
        cjk = is_cjk(count_ideographs(doc))
        assert tokens_of(len(whole), cjk) > 64  # every sample answer is longer than 64 tokens
        cut, reason = answered("extractive-bm25", prompt, temperature, 1, 64)
        assert (reason, cut) == ("length", whole[:chars_within(64, cjk)])
        assert tokens_of(len(cut), cjk) == 64
        assert answered("extractive-bm25", prompt, temperature, 1, 1024) == (whole, "stop")


@pytest.mark.parametrize(("chars", "cjk"), [(0, False), (211, False), (212, False), (96, True), (97, True)])
def test_chars_within_is_the_inverse_of_the_token_estimate(chars, cjk):
    tokens = tokens_of(chars, cjk)
    assert tokens_of(chars_within(tokens, cjk), cjk) == tokens
    assert tokens_of(chars_within(tokens, cjk) + 1, cjk) == tokens + 1


def test_a_max_tokens_sweep_cuts_at_64_and_changes_nothing_where_it_cuts_nothing(tmp_path):
    """At t = 0.4 the draw used to be seeded with the budget: 1024 and 32768 gave other answers."""
    rows = {}
    for budget in (64, 1024, 32768):
        cfg = settings(tmp_path, ["decoding.temperature=0.4", f"decoding.max_tokens={budget}"])
        cfg.out_dir = str(tmp_path / f"mt{budget}")
        result = run(cfg)
        rows[budget] = json.loads((result.out_dir / "responses.json").read_text(encoding="utf-8"))
    assert {r["finish_reason"] for r in rows[64]} == {"length"}
    assert {r["finish_reason"] for r in rows[1024]} == {"stop"}
    assert [r["response"] for r in rows[1024]] == [r["response"] for r in rows[32768]]
    assert all(full["response"].startswith(cut["response"]) for cut, full in zip(rows[64], rows[1024], strict=True))


def test_default_run_headline_is_unchanged(tmp_path):
    result = run(settings(tmp_path))
    assert result.summary["overall"] == 28.25


@pytest.mark.slow
def test_the_tour_shows_differences_in_seconds(tmp_path):
    brief = ["judge_panel=offline_panel", "model=extractive-brief"]
    runs = {"t01": ["judge_panel=offline_panel"], "t07": ["judge_panel=offline_panel", "decoding.temperature=0.7"],
            "ablation": ["judge_panel=offline_panel", "~judge_panel.judges.strict"],
            "brief": brief, "brief-ablation": [*brief, "~judge_panel.judges.strict"]}
    results = {}
    for name, overrides in runs.items():
        cfg = settings(tmp_path, overrides)
        cfg.out_dir = str(tmp_path / "runs" / name)
        results[name] = run(cfg)
    assert results["t01"].summary["overall"] != results["t07"].summary["overall"]
    assert results["ablation"].stats["requests"] == {"model": 0, "lenient": 0, "balanced": 0}  # all from the cache
    report = build(sources.from_run_dirs([str(tmp_path / "runs" / "*")]))
    assert len(report.leaderboard) == 5
    # the baseline leaderboard: a row per model, the spec's decoding and the full panel, settings as columns
    assert sorted(report.baseline["point"]) == ["extractive", "extractive-brief"]
    assert report.baseline.iloc[0][["judges", "temperature"]].tolist() == ["balanced,lenient,strict", 0.1]
    assert set(report.sweeps["key"]) == {"decoding.temperature"}
    # two models ranked under the full panel and without strict: Kendall's tau has something to say
    assert list(report.ablations["dropped"]) == ["strict", "strict"] and set(report.ablations["n_models"]) == {2}
    assert set(report.ablations["tau"]) == {1.0} and set(report.ablations["rank_change"]) == {0}
    pairs = report.agreement["pairs"]
    assert set(pairs) == {"balanced~lenient", "balanced~strict", "lenient~strict"}
    assert all(p["mad"] > 0 for p in pairs.values())
    alpha = report.agreement["krippendorff_alpha_interval"]
    assert alpha is not None and alpha < 1
    judges = report.agreement["judges"]
    assert judges["lenient"]["mean"] > judges["balanced"]["mean"] > judges["strict"]["mean"]


def test_seed_is_pinned_and_moves_with_replicate_and_request():
    from wildtrace.providers.offline import seed_of

    body = {"model": "lexical-judge-strict", "messages": [{"role": "user", "content": "x"}], "temperature": 0.1}
    assert seed_of(body, 0) == seed_of(dict(reversed(list(body.items()))), 0)  # key order does not matter
    # Changing it changes every sampled offline reply: fresh runs would disagree with cached ones.
    assert seed_of(body, 0) == PINNED_SEED
    assert len({seed_of(body, 0), seed_of(body, 1), seed_of({**body, "temperature": 0.2}, 0)}) == 3


PINNED_SEED = 956796148838850207
