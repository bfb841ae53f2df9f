"""Every config group composes; the caps table and flags are the spec's; bad keys fail early."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import OmegaConfBaseException

from conftest import compose_config
from wildtrace.app import CONF_DIR
from wildtrace.config import ConfigError, DecodingConfig, ModelConfig, effective_max_tokens, to_settings

# Spec §3, copied from the table: model → (en cap, cjk cap).
SPEC_CAPS = {
    **{m: (2_850_000, 850_000) for m in (
        "gpt-4.1", "gpt-5.4", "gpt-5.5", "qwen3.5-plus", "qwen3.6-plus", "qwen3.7-max", "qwen3.7-plus",
        "gemini-2.5-pro", "gemini-3.1", "deepseek-v4", "glm-5.2", "claude-opus-4.6", "claude-opus-4.8")},
    "deepseek-v3.2": (1_200_000, 400_000),
    "gpt-5.1": (1_050_000, 320_000),
    "kimi-k2.6": (1_000_000, 320_000),
    "doubao-seed-2.1": (1_000_000, 320_000),
    "qwen3-max": (690_000, 210_000),
    "minimax-m2.7": (570_000, 220_000),
    "custom": (2_850_000, 850_000),
    "extractive": (2_850_000, 850_000),
}
# Spec §2 names Opus 4.6/4.8 and GPT-5.4; the providers' docs add GPT-5.1/5.5 and Kimi K2.6 (see their files).
NO_TEMPERATURE = {"claude-opus-4.6", "claude-opus-4.8", "gpt-5.4", "gpt-5.1", "gpt-5.5", "kimi-k2.6"}


GATEWAY = "https://gateway.example.test/v1"


@pytest.fixture(autouse=True)
def gateway_url(monkeypatch):
    """The paper's private gateway judge has no default host: name one for composing the paper panels."""
    monkeypatch.setenv("WILDTRACE_GATEWAY_BASE_URL", GATEWAY)


def group(name: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / name).glob("*.yaml"))


def test_one_model_file_per_caps_row():
    assert set(group("model")) == set(SPEC_CAPS)


@pytest.mark.parametrize("model", sorted(SPEC_CAPS))
def test_every_model_composes_with_the_spec_caps(model):
    overrides = [f"model={model}"] + (["model.route=my-model"] if model == "custom" else [])
    cfg = to_settings(compose_config(overrides))
    assert (cfg.model.caps.en, cfg.model.caps.cjk) == SPEC_CAPS[model]
    assert cfg.model.send_temperature == (model not in NO_TEMPERATURE)
    assert cfg.model.name == model
    assert cfg.model.provider in ("openai", "anthropic", "gemini", "offline")
    if cfg.model.provider != "offline":
        assert cfg.model.api_key_env and cfg.model.api_key_env.isupper()  # a NAME, not a key


@pytest.mark.parametrize("panel", group("judge_panel"))
@pytest.mark.parametrize("dataset", group("dataset"))
def test_every_panel_and_dataset_composes(panel, dataset):
    cfg = to_settings(compose_config([f"judge_panel={panel}", f"dataset={dataset}"]))
    assert cfg.judge_panel.temperature == 0.1 and cfg.judge_panel.max_tokens == 16384
    assert cfg.judge_panel.judges
    assert Path(cfg.dataset.tasks).is_absolute() and Path(cfg.cache.dir).is_absolute()
    assert cfg.mlflow.tracking_uri.startswith("sqlite:////")


def test_paper_panel_is_the_spec_panel():
    judges = to_settings(compose_config(["judge_panel=paper"])).judge_panel.judges
    assert {k: (j.name, j.route) for k, j in judges.items()} == {
        "claude_sonnet": ("Claude-Sonnet-4.6", "mr.claude-sonnet-4-6-20260217"),
        "qwen": ("Qwen3.5", "qwen3.5-plus"),
        "gemini_flash": ("Gemini-2.5-Flash", "gemini-2.5-flash"),
    }
    assert judges["gemini_flash"].provider == "gemini"


def test_default_is_offline_sample():
    cfg = to_settings(compose_config())
    assert (cfg.dataset.name, cfg.model.name, cfg.judge_panel.name) == ("sample", "extractive", "offline")
    assert cfg.decoding.temperature == 0.1 and cfg.decoding.max_tokens is None
    assert cfg.retry.max_retries == 5 and cfg.stage == "all"


def test_drop_and_retarget_a_judge_from_the_command_line():
    cfg = to_settings(compose_config(["judge_panel=paper", "~judge_panel.judges.qwen",
                                      "judge_panel.judges.claude_sonnet.base_url=http://gateway/v1"]))
    assert list(cfg.judge_panel.judges) == ["claude_sonnet", "gemini_flash"]
    assert cfg.judge_panel.judges["claude_sonnet"].base_url == "http://gateway/v1"


@pytest.mark.parametrize(
    "reasoning, max_tokens, expected", [(True, None, 32768), (False, None, 8192), (True, 1000, 1000), (False, 4096, 4096)]
)
def test_effective_budget(reasoning, max_tokens, expected):
    model = ModelConfig(name="m", provider="openai", route="r", base_url="u", reasoning=reasoning)
    assert effective_max_tokens(model, DecodingConfig(max_tokens=max_tokens)) == expected


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["model.temprature=0.3"], "temprature"),
        (["decoding.max_tokens=lots"], "max_tokens"),
        (["model.caps.en=big"], "caps.en"),
        (["retry.max_retries=many"], "max_retries"),
    ],
)
def test_typos_and_wrong_types_fail_at_compose_naming_the_key(overrides, fragment):
    with pytest.raises((ConfigCompositionException, OmegaConfBaseException)) as info:
        to_settings(compose_config(overrides))
    assert fragment in str(info.value) + str(info.value.__cause__)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.provider=openia"], r"model.provider: unknown provider 'openia' \(choose from openai, anthropic, gemini, offline\)"),
        (["judge_panel.judges.lexical.provider=nope"], r"judge_panel.judges.lexical.provider: unknown provider 'nope'"),
        (["model.budget_field=tokens"], "model.budget_field"),
        (["stage=judge"], "stage=judge needs responses=PATH"),
        (["stage=grade"], "stage must be one of"),
        (["model.max_concurrency=0"], "model.max_concurrency must be at least 1"),
        (["~judge_panel.judges.lexical"], "judge_panel.judges is empty"),
        (["decoding.max_tokens=0"], "decoding.max_tokens must be positive"),
        (["retry.max_retries=-1"], r"retry.max_retries must be >= 0"),
        (["retry.backoff_base_s=-1"], r"retry.backoff_base_s must be >= 0"),
        (["decoding.temperature=5"], r"decoding.temperature must be within \[0.0, 2.0\] for model \(offline\), got 5"),
        (["decoding.temperature=-0.1"], r"decoding.temperature must be within"),
        (["model=claude-opus-4.6", "model.send_temperature=true", "decoding.temperature=1.5"],
         r"decoding.temperature must be within \[0.0, 1.0\] for model \(anthropic\)"),
        (["judge_panel.temperature=3"], r"judge_panel.temperature must be within \[0.0, 2.0\] for judge_panel.judges.lexical"),
        (["decoding.reasoning_effort=ultra"], r"decoding.reasoning_effort: unknown reasoning_effort 'ultra'"),
        (["judge_panel.judges.lexical.reasoning_format=anthropic-budget"],
         r"judge_panel.judges.lexical.reasoning_format: reasoning_format 'anthropic-budget' does not apply"),
        (["model.base_url=ftp://x"], r"model.base_url must start with http:// or https://"),
        (["model.timeout_s=0"], r"model.timeout_s must be positive"),
        (["model.max_call_s=-1"], r"model.max_call_s must be positive"),
        (["max_response_mb=0"], r"max_response_mb must be positive"),
        (["access=gateway"], r"gateway.base_url"),
    ],
)
def test_semantic_errors_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        to_settings(compose_config(overrides))


def test_judge_keys_must_be_plain_identifiers():
    cfg = compose_config()
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.judge_panel.judges["bad.key"] = cfg.judge_panel.judges["lexical"]
    with pytest.raises(ConfigError, match="key 'bad.key' must use only"):
        to_settings(cfg)


def test_custom_model_requires_a_route():
    with pytest.raises(OmegaConfBaseException, match="route"):
        to_settings(compose_config(["model=custom"]))


@pytest.mark.parametrize("judge", ["claude_sonnet", "qwen", "gemini_flash"])
def test_ablation_panels_reuse_the_paper_judges(judge):
    def panel(name):
        return to_settings(compose_config([f"judge_panel={name}"])).judge_panel.judges

    paper, only, without = panel("paper"), panel(f"paper_only_{judge}"), panel(f"paper_without_{judge}")
    assert list(only) == [judge] and only[judge] == paper[judge]  # same endpoint → same cache keys
    assert set(without) == set(paper) - {judge}
    assert all(without[k] == paper[k] for k in without)


def test_private_gateway_judge_without_its_variable_fails_naming_it(monkeypatch):
    monkeypatch.delenv("WILDTRACE_GATEWAY_BASE_URL")
    with pytest.raises(ConfigError, match=r"judge_panel.judges.claude_sonnet.base_url is empty: set "
                                          r"WILDTRACE_GATEWAY_BASE_URL \(this endpoint has no public default"):
        to_settings(compose_config(["judge_panel=paper"]))
    # A panel without the gateway judge needs no gateway.
    assert "claude_sonnet" not in to_settings(compose_config(["judge_panel=paper_only_qwen"])).judge_panel.judges


def test_gateway_access_points_every_endpoint_at_one_url_and_key(monkeypatch):
    monkeypatch.delenv("WILDTRACE_GATEWAY_BASE_URL")
    cfg = to_settings(compose_config(["model=claude-opus-4.6", "judge_panel=paper", "access=gateway",
                                      "gateway.base_url=http://gw.example.test:4000/v1"]))
    endpoints = [cfg.model, *cfg.judge_panel.judges.values()]
    assert [(e.provider, e.base_url, e.api_key_env) for e in endpoints] == [
        ("openai", "http://gw.example.test:4000/v1", "API_KEY")] * 4
    assert [e.route for e in endpoints] == ["claude-opus-4-6", "mr.claude-sonnet-4-6-20260217", "qwen3.5-plus",
                                            "gemini-2.5-flash"]


def test_gateway_access_leaves_offline_endpoints_alone():
    cfg = to_settings(compose_config(["access=gateway", "gateway.base_url=http://gw.example.test/v1"]))
    assert (cfg.model.provider, cfg.judge_panel.judges["lexical"].provider) == ("offline", "offline")
