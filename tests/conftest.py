"""Shared helpers: compose the real config tree with overrides, and write small releases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from wildtrace.app import CONF_DIR
from wildtrace.config import WildtraceConfig, register, to_settings
from wildtrace.providers.base import EndpointSpec

TEST_KEY_ENV = "WILDTRACE_TEST_KEY"


def compose_config(overrides: list[str] | None = None):
    """The DictConfig Hydra would give the app for these overrides."""
    register()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=overrides or [])


def settings(tmp_path: Path, overrides: list[str] | None = None, judges: dict | None = None,
             progress: bool = False) -> WildtraceConfig:
    """Validated settings rooted in tmp_path (cache, MLflow store, run dir), MLflow off by default."""
    cfg = compose_config([f"root={tmp_path / 'outputs'}", "mlflow.enabled=false", *(overrides or [])])
    if judges is not None:
        with open_dict(cfg):  # Hydra composes in struct mode; new judge keys need it open
            cfg.judge_panel.judges = {}
            OmegaConf.update(cfg, "judge_panel.judges", judges, merge=True)
    cfg.progress = progress
    result = to_settings(cfg)
    result.out_dir = str(tmp_path / "run")
    return result


def openai_judge(url: str, route: str) -> dict:
    """A judge entry pointing at a loopback server."""
    return {"name": route, "provider": "openai", "route": route, "base_url": url + "/v1", "api_key_env": TEST_KEY_ENV}


def write_release(root: Path, tasks: list[dict], documents: dict[str, str]) -> tuple[Path, Path]:
    """A tasks file and corpus folder in the release's shape; returns (tasks path, corpus dir)."""
    corpus = root / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for name, text in documents.items():
        (corpus / name).write_bytes(text.encode("utf-8"))
    path = root / "tasks.json"
    path.write_text(json.dumps(tasks, ensure_ascii=False), encoding="utf-8")
    return path, corpus


def make_task(qid: str, question: str, corpus_file: str, rubric: list[tuple[float, str]] | None = None, **meta) -> dict:
    """One release-shaped task record."""
    rubric = rubric or [(60, "names the cause"), (40, "gives the time")]
    return {"question_id": qid, "question_text": question, "corpus_file": f"corpus/{corpus_file}",
            "ground_truth": {"scoring_rubric": [{"points": p, "correct_criterion": c} for p, c in rubric]}, **meta}


@pytest.fixture
def test_key(monkeypatch):
    """A canary API key in the environment, by name only in configs."""
    key = "sk-canary-" + "7f3a9c" * 4
    monkeypatch.setenv(TEST_KEY_ENV, key)
    return key


def endpoint_spec(provider: str = "openai", **overrides) -> EndpointSpec:
    """An EndpointSpec for wire-format and retry tests."""
    base = dict(label="model", name="test-model", provider=provider, route="route-x",
                base_url="https://api.example.com/v1", api_key_env="TEST_API_KEY", max_concurrency=4, timeout_s=30.0)
    base.update(overrides)
    return EndpointSpec(**base)


def tracked_run(cfg: WildtraceConfig, **kwargs):
    """run() with the observer the entry point hands in (MLflow tracking when ``mlflow.enabled``)."""
    from wildtrace.app import observer_for
    from wildtrace.runtime.run.execute import run

    return run(cfg, observer=observer_for(cfg, kwargs.get("parent_run_id")), **kwargs)
