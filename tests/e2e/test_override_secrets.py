"""A key given in any override never reaches a file, a log, MLflow or the terminal.

Hydra writes the command line down (``.hydra/overrides.yaml``, ``multirun.yaml``, the job
log) before any job runs, so the refusal reads the raw overrides first: each form below,
given with a canary key, exits 2 naming the config key, and the canary is found in no file
under the folder the command ran in (outputs, cache, MLflow store) nor in stdout/stderr.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_entry_points import cli, error_lines
from wildtrace.config import ConfigError
from wildtrace.config.checks import check_override_secrets, override_secrets
from wildtrace.core.credentials import looks_like_key

CANARY = "sk-canaryQ7w9Zt4Lm2Xp8Vn3Rb6"

#: (override, the config key the error names)
FORMS = [
    (f"model.base_url=http://u:{CANARY}@127.0.0.1:9/v1", "model.base_url"),
    (f"model.base_url=http://{CANARY}@127.0.0.1:9/v1", "model.base_url"),
    (f"model.base_url=http://127.0.0.1:9/v1?key={CANARY}", "model.base_url"),
    (f"model.base_url='http://127.0.0.1:9/v1?x=1&api_key={CANARY}'", "model.base_url"),
    (f"judge_panel.judges.lexical.base_url=http://127.0.0.1:9/v1?token={CANARY}",
     "judge_panel.judges.lexical.base_url"),
    (f"+model.extra_body.api_key={CANARY}", "model.extra_body.api_key"),
    (f"+model.extra_body={{auth: {{x-api-key: {CANARY}}}}}", "model.extra_body.auth"),
    (f"+model.api_key={CANARY}", "model.api_key"),
    (f"+model.headers.Authorization='Bearer {CANARY}'", "model.headers.Authorization"),
    (f"model.api_key_env={CANARY}", "model.api_key_env"),
    (f"gateway.api_key_env={CANARY}", "gateway.api_key_env"),
    (f"+hydra.job.env_set.OPENAI_API_KEY={CANARY}", "hydra.job.env_set.OPENAI_API_KEY"),
]


def files_holding(root: Path, text: str) -> list[Path]:
    """Every file under ``root`` whose bytes hold ``text``."""
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


#: The forms also tried as a sweep (``-m``), whose launcher writes multirun.yaml first.
SWEPT = {0, 2, 5, 7, 9}
CASES = [(form, key, False) for form, key in FORMS] + [(form, key, True) for i, (form, key) in enumerate(FORMS)
                                                         if i in SWEPT]


@pytest.mark.parametrize("override,key,multirun", CASES, ids=[k + ("-m" if m else "") for _, k, m in CASES])
def test_a_key_in_an_override_is_refused_before_anything_is_written(tmp_path: Path, override: str, key: str,
                                                                     multirun: bool) -> None:
    args = ["-m"] if multirun else []
    proc = cli("wildtrace", *args, override, "dataset.limit=1", "mlflow.enabled=true", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert CANARY not in proc.stdout + proc.stderr
    assert [m["prog"] for m in error_lines(proc.stderr)] == ["wildtrace"]
    assert f"{key}:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert files_holding(tmp_path, CANARY) == []
    assert list(tmp_path.iterdir()) == []  # nothing at all: no outputs/, cache, store, multirun.yaml


@pytest.mark.parametrize("module", ["wildtrace.check", "wildtrace.estimate", "wildtrace.probe", "wildtrace.report"])
def test_every_entry_point_that_composes_refuses_them_too(tmp_path: Path, module: str) -> None:
    proc = cli(module, f"model.base_url=http://u:{CANARY}@127.0.0.1:9/v1", f"+model.extra_body.api_key={CANARY}",
               cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert CANARY not in proc.stdout + proc.stderr
    assert "model.base_url:" in proc.stderr and "model.extra_body.api_key:" in proc.stderr  # every problem at once
    assert list(tmp_path.iterdir()) == []


def test_a_key_in_the_paper_configs_url_is_refused_before_its_run_folder(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"base_url": f"http://127.0.0.1:9/v1?api_key={CANARY}", "model": "m"}))
    sample = Path(__file__).resolve().parents[2] / "wildtrace" / "data" / "sample"
    proc = cli("wildtrace.paper", "eval", "--config", str(config), "--data", str(sample / "tasks.json"),
               "--corpus", str(sample / "corpus"), "--out", str(tmp_path / "responses.json"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert CANARY not in proc.stdout + proc.stderr
    assert "model.base_url:" in proc.stderr
    assert files_holding(tmp_path, CANARY) == [config]


def test_a_key_in_a_composed_url_is_refused_before_the_run_files(tmp_path: Path) -> None:
    """From a variable the config reads (``${oc.env:…}``): the URL is only known once composed."""
    proc = cli("wildtrace", "model.base_url=${oc.env:WT_TEST_URL}", "mlflow.enabled=false", cwd=tmp_path,
               env={"WT_TEST_URL": f"http://127.0.0.1:9/v1?key={CANARY}"})
    assert proc.returncode == 2, proc.stderr
    assert CANARY not in proc.stdout + proc.stderr
    assert "model.base_url:" in proc.stderr
    assert files_holding(tmp_path, CANARY) == []


#: Overrides that hold no credential and pass.
CLEAN = ["model.api_key_env=OPENAI_API_KEY", "model.api_key_env=my_gateway_key", "model.base_url=http://127.0.0.1:8/v1",
         "model.base_url=https://h.example/v1?api-version=2024-10-21", "decoding.max_tokens=10",
         "+model.extra_body.thinking={type: enabled, budget_tokens: 2048}", "+model.extra_body.max_tokens=5",
         "mlflow.tracking_uri=sqlite:////tmp/a@b/mlflow.db", "~model.extra_body.api_key", "dataset.limit=1,2",
         "gateway.base_url=http://127.0.0.1:8/v1", "model.base_url_env=MY_URL", "judge_panel.max_tokens=512"]


@pytest.mark.parametrize("override", CLEAN)
def test_clean_overrides_pass(override: str) -> None:
    assert override_secrets(override) == []


def test_every_problem_is_named_and_no_value_shown() -> None:
    with pytest.raises(ConfigError) as caught:
        check_override_secrets([form for form, _ in FORMS])
    text = str(caught.value)
    assert CANARY not in text and "canary" not in text.lower()
    for _, key in FORMS:
        assert f"{key}:" in text


@pytest.mark.parametrize("text,key_like", [
    ("OPENAI_API_KEY", False), ("API_KEY", False), ("my_gateway_key", False), ("DASHSCOPE_API_KEY_2", False),
    ("sk-proj-abc", True), ("AIzaSyD4x9Qm3Lk7Pw2Zr8Tn5Vb1", True), ("xai-12345", True), ("abc.def", True),
    ("sk_live_x", True), ("Bearer x", True), ("", False),
])
def test_what_looks_like_a_key_where_a_name_goes(text: str, key_like: bool) -> None:
    assert looks_like_key(text) is key_like
