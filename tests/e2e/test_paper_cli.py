"""The spec's §6 scripts (wildtrace-eval, wildtrace-judge) on the harness's Hydra config and code path.

The end-to-end test runs the two steps against a loopback endpoint that plays the model and
the three paper judges (two OpenAI-compatible, one Gemini), then the equivalent one-step Hydra
run in another folder (its own cache and MLflow store), and compares the scores task by task.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import compose_config, make_task, write_release
from servers.loopback import Call, LoopbackServer, Reply, chat
from wildtrace import paper
from wildtrace.config import ConfigError, to_settings

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-paper-" + "5e1f" * 6
EN_CAP, CJK_CAP = 3000, 1000
JUDGE_BASE = {"mr.claude-sonnet-4-6-20260217": 55, "qwen3.5-plus": 70, "gemini-2.5-flash": 40}


def judge_total(route: str, prompt: str) -> int:
    """A judge's total: by judge, varying with the task (so a mix-up of tasks or judges shows)."""
    return JUDGE_BASE[route] + int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 25


def gemini(text: str) -> Reply:
    """A Gemini generateContent reply."""
    return Reply(200, {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                       "finishReason": "STOP"}],
                       "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 5}})


def responder(call: Call) -> Reply:
    """The model answers with the question; each judge grades by its own rule; Gemini speaks its format."""
    prompt = call.prompt
    if prompt.startswith("STRICT grader"):
        route = call.route or re.search(r"/models/([^:/]+):", call.path).group(1)
        total = judge_total(route, prompt)
        reply = json.dumps({"points_awarded": [total], "total": total})
        return gemini(reply) if re.search(r":(stream)?[gG]enerateContent", call.path) else chat(reply)
    question = re.search(r"Question: (.*)", prompt).group(1)
    return chat(f"The document says: {question} — the seal was worn, at 03:14.")


def release(root: Path) -> tuple[Path, Path]:
    """Four tasks in the release layout (data/ beside corpus/); one document over the en cap."""
    tasks = [make_task(f"t{i}", f"What happened to unit {i}?", name) for i, name in
             enumerate(["a.txt", "b.txt", "a.txt", "long.txt"])]
    docs = {"a.txt": "The pump failed at 03:14 because the seal was worn. " * 10,
            "b.txt": "港口于1902年重建。" * 30, "long.txt": "x" * (EN_CAP + 1)}
    tasks_path, corpus = write_release(root, tasks, docs)
    data = root / "data" / "wildtrace_strict481.with_answers.json"
    data.parent.mkdir()
    tasks_path.rename(data)
    return data, corpus


def config_json(url: str) -> dict:
    """A §6 config.json: one gateway, the model, its caps, and the paper's three judges."""
    return {"base_url": f"{url}/v1", "model": "my-model", "caps": {"en": EN_CAP, "cjk": CJK_CAP},
            "reasoning": False, "temperature": 0.1,
            "judges": [{"name": "Claude-Sonnet-4.6", "model": "mr.claude-sonnet-4-6-20260217"},
                       {"name": "Qwen3.5", "model": "qwen3.5-plus"},
                       {"name": "Gemini-2.5-Flash", "model": "gemini-2.5-flash", "provider": "gemini",
                        "base_url": url}]}


def script(step: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m wildtrace.paper <step> …`` (the console scripts' code) in ``cwd`` with API_KEY set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WILDTRACE_"))}
    env.update(API_KEY=KEY, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "wildtrace.paper", step, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def hydra(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    """The one-step Hydra run (``python -m wildtrace``) in ``cwd``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WILDTRACE_"))}
    env.update(API_KEY=KEY, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "wildtrace", *overrides], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_two_step_scripts_score_as_the_hydra_run(tmp_path: Path) -> None:
    """eval → judge gives the same per-task scores and overall as the equivalent Hydra run; both land in MLflow."""
    data, corpus = release(tmp_path / "release")
    with LoopbackServer(responder) as server:
        config = tmp_path / "config.json"
        config.write_text(json.dumps(config_json(server.url)))
        work = tmp_path / "paper"
        work.mkdir()
        responses, scores = work / "results" / "mymodel.responses.json", work / "results" / "mymodel.scores.json"

        step1 = script("eval", work, "--config", str(config), "--data", str(data), "--corpus", str(corpus),
                       "--out", str(responses))
        assert step1.returncode == 0, step1.stdout + step1.stderr
        answer_calls = list(server.calls)
        step2 = script("judge", work, "--config", str(config), "--data", str(data), "--responses", str(responses),
                       "--out", str(scores))  # no --corpus: found beside data/, as in the release
        assert step2.returncode == 0, step2.stdout + step2.stderr
        judge_calls = server.calls[len(answer_calls):]

        other = tmp_path / "hydra"
        other.mkdir()
        one = hydra(other, "model=custom", "model.name=my-model", "model.route=my-model",
                    f"model.base_url={server.url}/v1", "model.api_key_env=API_KEY", f"model.caps.en={EN_CAP}",
                    f"model.caps.cjk={CJK_CAP}", "dataset=wildtrace", f"dataset.tasks={data}",
                    f"dataset.corpus={corpus}", "judge_panel=paper",
                    f"judge_panel.judges.claude_sonnet.base_url={server.url}/v1",
                    "judge_panel.judges.claude_sonnet.api_key_env=API_KEY",
                    f"judge_panel.judges.qwen.base_url={server.url}/v1", "judge_panel.judges.qwen.api_key_env=API_KEY",
                    f"judge_panel.judges.gemini_flash.base_url={server.url}",
                    "judge_panel.judges.gemini_flash.api_key_env=API_KEY", "progress=false")
        assert one.returncode == 0, one.stdout + one.stderr

    # Step 1 asked only the model, for the three tasks in scope; step 2 only the judges, 3 × 3.
    assert [c.route for c in answer_calls] == ["my-model"] * 3
    assert len(judge_calls) == 9 and all(c.route != "my-model" for c in judge_calls)
    for call in server.calls:  # one API_KEY for every endpoint
        assert KEY in (call.headers.get("authorization", ""), call.headers.get("x-goog-api-key"),
                       call.headers.get("authorization", "").removeprefix("Bearer "))

    mine = json.loads(scores.read_text())
    run_dir = Path(re.search(r"^run dir: (.+)$", one.stdout, re.M).group(1))
    theirs = json.loads((run_dir / "scores.json").read_text())
    assert mine["overall"] == theirs["overall"] and mine["scored"] == theirs["scored"]
    for key in ("n_total", "n_scored", "n_out_of_context", "n_failed", "n_unscored", "n_missing"):
        assert mine[key] == theirs[key], key
    assert {t["question_id"]: (t["status"], t["score"]) for t in mine["tasks"]} == \
        {t["question_id"]: (t["status"], t["score"]) for t in theirs["tasks"]}
    assert mine["n_out_of_context"] == 1 and mine["n_scored"] == 3 and 0 < mine["overall"] < 100
    expected = sum(sum(judge_total(r, c.prompt) for c in judge_calls if (c.route or "gemini-2.5-flash") == r)
                   for r in JUDGE_BASE) / 3 / 4  # mean of the judges per task, summed, over all 4 tasks
    assert mine["overall"] == pytest.approx(expected, abs=1e-6)
    assert f"overall: {mine['overall']:.2f}% (All view) -> {scores}" in step2.stdout

    given = json.loads(responses.read_text())
    hydra_rows = json.loads((run_dir / "responses.json").read_text())
    assert [(r["question_id"], r["status"], r["response"]) for r in given] == \
        [(r["question_id"], r["status"], r["response"]) for r in hydra_rows]
    assert KEY not in responses.read_text() + scores.read_text()

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work / 'outputs' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("wildtrace").experiment_id])
    assert len(runs) == 2
    assert {r.data.params["model.route"] for r in runs} == {"my-model"}
    judged = [r for r in runs if "overall_pct" in r.data.metrics]
    assert len(judged) == 1 and judged[0].data.metrics["overall_pct"] == pytest.approx(mine["overall"], abs=0.005)
    assert (Path(judged[0].data.tags["wildtrace.run_dir"]) / ".hydra" / "overrides.yaml").is_file()
    assert (Path(judged[0].data.tags["wildtrace.run_dir"]) / "app.log").read_text().count("overall (All view)") == 1


@pytest.mark.slow
def test_missing_api_key_fails_before_any_request(tmp_path: Path) -> None:
    """No API_KEY: exit 2 naming the variable, no request sent."""
    data, corpus = release(tmp_path / "release")
    with LoopbackServer(responder) as server:
        config = tmp_path / "config.json"
        config.write_text(json.dumps(config_json(server.url)))
        env = {k: v for k, v in os.environ.items() if k != "API_KEY"}
        env["PYTHONPATH"] = str(ROOT)
        proc = subprocess.run([sys.executable, "-m", "wildtrace.paper", "eval", "--config", str(config), "--data",
                               str(data), "--corpus", str(corpus), "--out", str(tmp_path / "r.json")], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)
        assert server.calls == []
    assert proc.returncode == 2
    assert "environment variable API_KEY is not set" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# config.json → overrides (fast)

def test_overrides_golden(tmp_path: Path) -> None:
    """The exact Hydra overrides of both steps; they differ only in stage and responses."""
    cfg = paper.parse_config(config_json("http://127.0.0.1:8000"))
    data, corpus = tmp_path / "d.json", tmp_path / "corpus"
    model_and_panel = [
        "model=custom", "model.name='my-model'", "model.route='my-model'",
        "model.base_url='http://127.0.0.1:8000/v1'", "model.provider=openai", "model.api_key_env=API_KEY",
        f"model.caps.en={EN_CAP}", f"model.caps.cjk={CJK_CAP}", "model.reasoning=false", "decoding.temperature=0.1",
        "judge_panel=offline", "~judge_panel.judges.lexical",
        "judge_panel.name='Claude-Sonnet-4.6+Qwen3.5+Gemini-2.5-Flash'",
        "+judge@judge_panel.judges.claude-sonnet-4_6=lexical",
        "judge_panel.judges.claude-sonnet-4_6.name='Claude-Sonnet-4.6'",
        "judge_panel.judges.claude-sonnet-4_6.provider=openai",
        "judge_panel.judges.claude-sonnet-4_6.route='mr.claude-sonnet-4-6-20260217'",
        "judge_panel.judges.claude-sonnet-4_6.base_url='http://127.0.0.1:8000/v1'",
        "judge_panel.judges.claude-sonnet-4_6.api_key_env=API_KEY",
        "+judge@judge_panel.judges.qwen3_5=lexical", "judge_panel.judges.qwen3_5.name='Qwen3.5'",
        "judge_panel.judges.qwen3_5.provider=openai", "judge_panel.judges.qwen3_5.route='qwen3.5-plus'",
        "judge_panel.judges.qwen3_5.base_url='http://127.0.0.1:8000/v1'",
        "judge_panel.judges.qwen3_5.api_key_env=API_KEY",
        "+judge@judge_panel.judges.gemini-2_5-flash=lexical",
        "judge_panel.judges.gemini-2_5-flash.name='Gemini-2.5-Flash'",
        "judge_panel.judges.gemini-2_5-flash.provider=gemini",
        "judge_panel.judges.gemini-2_5-flash.route='gemini-2.5-flash'",
        "judge_panel.judges.gemini-2_5-flash.base_url='http://127.0.0.1:8000'",
        "judge_panel.judges.gemini-2_5-flash.api_key_env=API_KEY",
        "dataset=wildtrace", f"dataset.tasks='{data}'", f"dataset.corpus='{corpus}'",
    ]
    assert paper.build_overrides(cfg, None, data, corpus, "answer") == [*model_and_panel, "stage=answer"]
    assert paper.build_overrides(cfg, None, data, corpus, "judge", tmp_path / "r.json") == [
        *model_and_panel, "stage=judge", f"responses='{tmp_path / 'r.json'}'"]


def test_overrides_compose_to_the_settings_config_json_names(tmp_path: Path) -> None:
    """Composed, the overrides give exactly config.json's endpoints, key by name only, and its panel alone."""
    cfg = paper.parse_config(config_json("http://127.0.0.1:8000"))
    settings = to_settings(compose_config(paper.build_overrides(cfg, None, tmp_path / "d.json", tmp_path, "answer")))
    assert (settings.model.route, settings.model.base_url, settings.model.api_key_env) == (
        "my-model", "http://127.0.0.1:8000/v1", "API_KEY")
    assert (settings.model.caps.en, settings.model.caps.cjk, settings.stage) == (EN_CAP, CJK_CAP, "answer")
    judges = settings.judge_panel.judges
    assert {k: (j.name, j.provider, j.route, j.base_url, j.api_key_env) for k, j in judges.items()} == {
        "claude-sonnet-4_6": ("Claude-Sonnet-4.6", "openai", "mr.claude-sonnet-4-6-20260217",
                              "http://127.0.0.1:8000/v1", "API_KEY"),
        "qwen3_5": ("Qwen3.5", "openai", "qwen3.5-plus", "http://127.0.0.1:8000/v1", "API_KEY"),
        "gemini-2_5-flash": ("Gemini-2.5-Flash", "gemini", "gemini-2.5-flash", "http://127.0.0.1:8000", "API_KEY"),
    }
    assert judges["qwen3_5"].extra_body == {} and judges["qwen3_5"].send_temperature is True


@pytest.mark.parametrize("value", ["http://127.0.0.1:8/v1", "it's", "a,b=c d", "back\\slash", "end\\",
                                   "x${oc.env:HOME}y", "[x]", "mr.claude-sonnet-4-6-20260217", "名前"])
def test_quote_round_trips_through_hydra(value: str) -> None:
    """Whatever config.json holds reads back unchanged: no splitting, no interpolation."""
    assert compose_config(["model=custom", f"model.route={paper.quote(value)}"]).model.route == value


def test_a_known_model_gets_the_spec_table_row(tmp_path: Path) -> None:
    """No caps in config.json for gpt-5.1: the spec's row (1,050,000 / 320,000), reasoning, its budget field."""
    from wildtrace.app import CONF_DIR

    cfg = paper.parse_config({"base_url": "http://h/v1", "model": "gpt-5.1"})
    row = paper.table_row("gpt-5.1", Path(CONF_DIR))
    assert row == paper.TableRow("gpt-5.1", (1_050_000, 320_000), False, True, "max_completion_tokens", "openai")
    settings = to_settings(compose_config(paper.build_overrides(cfg, row, tmp_path / "d", tmp_path, "answer")))
    assert (settings.model.caps.en, settings.model.caps.cjk) == (1_050_000, 320_000)
    assert settings.model.reasoning and settings.model.budget_field == "max_completion_tokens"
    assert paper.table_row("mr.claude-opus-4-6-20260101", Path(CONF_DIR)).file == "claude-opus-4.6"
    assert paper.table_row("my-new-model", Path(CONF_DIR)) is None


@pytest.mark.parametrize(
    "caps, expected",
    [
        ({"en": 10, "cjk": 5}, (10, 5)),
        ({"my-model": {"en": 7, "cjk": 3}, "default": {"en": 1, "cjk": 1}}, (7, 3)),
        ({"other": {"en": 7, "cjk": 3}, "default": {"en": 2, "cjk": 1}}, (2, 1)),
        ({"other": {"en": 7, "cjk": 3}}, None),
        (None, None),
    ],
)
def test_caps_pair_or_table(caps, expected) -> None:
    """caps: a pair, or a table keyed by model with an optional default row."""
    assert paper.parse_caps(caps, "my-model") == expected


@pytest.mark.parametrize(
    "data, message",
    [
        ([], "config.json must hold a JSON object"),
        ({"model": "m"}, "config.base_url is required"),
        ({"base_url": "u"}, "config.model is required"),
        ({"base_url": "u", "model": "m", "judgs": []}, "config: unknown key 'judgs' (did you mean 'judges'?)"),
        ({"base_url": "u", "model": "m", "temperature": "hot"}, "config.temperature must be int or float"),
        ({"base_url": "u", "model": "m", "reasoning": "yes"}, "config.reasoning must be bool"),
        ({"base_url": "u", "model": "m", "max_tokens": True}, "config.max_tokens must be int"),
        ({"base_url": "u", "model": "m", "max_tokens": 0}, "config.max_tokens must be positive"),
        ({"base_url": "u", "model": "m", "provider": "azure"}, "config.provider: unknown provider 'azure'"),
        ({"base_url": "u", "model": "m", "caps": {"en": 10}}, "config.caps.cjk is required"),
        ({"base_url": "u", "model": "m", "caps": {"en": 0, "cjk": 1}}, "caps must be positive"),
        ({"base_url": "u", "model": "m", "judges": [{"name": "j"}]}, "config.judges[0].model (or .route) is required"),
        ({"base_url": "u", "model": "m", "judges": [{"model": "j", "base": "x"}]},
         "config.judges[0]: unknown key 'base'"),
        ({"base_url": "u", "model": "m", "judges": "j"}, "config.judges must be a list"),
        ({"base_url": " ", "model": "m"}, "config.base_url must not be empty"),
    ],
)
def test_config_json_errors_name_the_key(data, message) -> None:
    """Table-driven: each mistake in config.json is a ConfigError naming its key."""
    with pytest.raises(ConfigError) as info:
        paper.parse_config(data)
    assert message in str(info.value)


def test_read_config_bounds_and_decodes(tmp_path: Path) -> None:
    """Not JSON, too big, absent: one line naming the file."""
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        paper.read_config(bad)
    bad.write_bytes(b" " * (paper.MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than"):
        paper.read_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        paper.read_config(tmp_path / "absent.json")


def test_judges_keyed_by_name_and_keys_unique() -> None:
    """judges may be an object keyed by name; keys are unique and never 'lexical'."""
    judges = paper.parse_judges({"Lexical": {"model": "a"}, "J 1": {"model": "b"}, "j-1": {"route": "c"}}, "u")
    assert [(j.key, j.name, j.route, j.base_url) for j in judges] == [
        ("lexical_2", "Lexical", "a", "u"), ("j_1", "J 1", "b", "u"), ("j-1", "j-1", "c", "u")]


def test_default_corpus_follows_the_release_layout(tmp_path: Path) -> None:
    """data/x.json → ../corpus; a corpus/ beside the file otherwise."""
    (tmp_path / "rel" / "data").mkdir(parents=True)
    (tmp_path / "rel" / "corpus").mkdir()
    assert paper.default_corpus(tmp_path / "rel" / "data" / "x.json") == tmp_path / "rel" / "corpus"
    (tmp_path / "flat" / "corpus").mkdir(parents=True)
    assert paper.default_corpus(tmp_path / "flat" / "x.json") == tmp_path / "flat" / "corpus"
