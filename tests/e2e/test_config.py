"""Every config group composes; the caps table and flags are the spec's; bad keys fail early."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import OmegaConfBaseException

from conftest import compose_config
from servers.loopback import LoopbackServer, chat
from wildtrace.app import CONF_DIR, prepare
from wildtrace.config import (
    ConfigError, DecodingConfig, JudgeConfig, ModelConfig, WildtraceConfig, effective_max_tokens, to_settings,
)
from wildtrace.config.checks import check_known_keys, describe, model_identity, spec_warnings, unknown_keys

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
    "extractive-brief": (2_850_000, 850_000),
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
    "reasoning, max_tokens, expected",
    [(True, None, 32768), (False, None, 8192), (True, 1000, 1000), (False, 4096, 4096)],
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
        (["model.provider=openia"],
         r"model.provider: unknown provider 'openia' \(choose from openai, anthropic, gemini, offline\)"),
        (["judge_panel.judges.lexical.provider=nope"], r"judge_panel.judges.lexical.provider: unknown provider 'nope'"),
        (["model.budget_field=tokens"], "model.budget_field"),
        (["stage=judge"], "stage=judge needs responses=PATH"),
        (["stage=grade"], "stage must be one of"),
        (["model.max_concurrency=0"], "model.max_concurrency must be at least 1"),
        (["~judge_panel.judges.lexical"], "judge_panel.judges is empty"),
        (["decoding.max_tokens=0"], "decoding.max_tokens must be positive"),
        (["retry.max_retries=-1"], r"retry.max_retries must be between 0 and 100"),
        (["retry.backoff_base_s=-1"], r"retry.backoff_base_s must be >= 0"),
        (["decoding.temperature=5"], r"decoding.temperature must be within \[0.0, 2.0\] for model \(offline\), got 5"),
        (["decoding.temperature=-0.1"], r"decoding.temperature must be within"),
        (["model=claude-opus-4.6", "model.send_temperature=true", "decoding.temperature=1.5"],
         r"decoding.temperature must be within \[0.0, 1.0\] for model \(anthropic\)"),
        (["judge_panel.temperature=3"],
         r"judge_panel.temperature must be within \[0.0, 2.0\] for judge_panel.judges.lexical"),
        (["decoding.reasoning_effort=ultra"], r"decoding.reasoning_effort: unknown reasoning_effort 'ultra'"),
        (["judge_panel.judges.lexical.reasoning_format=anthropic-budget"],
         r"judge_panel.judges.lexical.reasoning_format: reasoning_format 'anthropic-budget' does not apply"),
        (["model.base_url=ftp://x"], r"model.base_url must start with http:// or https://"),
        (["model.timeout_s=0"], r"model.timeout_s must be positive"),
        (["model.max_call_s=-1"], r"model.max_call_s must be positive"),
        (["max_response_mb=0"], r"max_response_mb must be positive"),
        (["access=gateway"], r"gateway.base_url"),
        (["model.family=''"], r"model.family must be a family name such as qwen or null \(unknown\), got ''"),
        (["judge_panel.judges.lexical.family=' qwen'"], r"judge_panel.judges.lexical.family must be a family name"),
    ],
)
def test_semantic_errors_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        to_settings(compose_config(overrides))


def test_families_default_to_unknown_and_the_paper_judges_say_theirs():
    """A family is what the report's judge-family check reads; a file that sets none is unknown."""
    assert to_settings(compose_config()).model.family is None
    paper = to_settings(compose_config(["judge_panel=paper", "model=qwen3.7-max"]))
    assert {k: j.family for k, j in paper.judge_panel.judges.items()} == {
        "claude_sonnet": "claude", "qwen": "qwen", "gemini_flash": "gemini"}
    assert paper.model.family == "qwen"
    assert to_settings(compose_config(["model.family=qwen"])).model.family == "qwen"


def test_judge_keys_must_be_plain_identifiers():
    cfg = compose_config()
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.judge_panel.judges["bad.key"] = cfg.judge_panel.judges["lexical"]
    with pytest.raises(ConfigError, match=r"key 'bad\.key' must use only"):
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


# ---------------------------------------------------------------------------------------------
# Unknown keys, also when added with `+` (wildtrace.config.checks), and the spec's warnings.

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "overrides, unknown, message",
    [
        (["+decoding.temprature=0.3"], ["decoding.temprature"],
         "unknown config key: decoding.temprature (did you mean decoding.temperature?)"),
        (["+temprature=0.3"], ["temprature"], "temprature (valid keys there: model, decoding,"),
        (["+stge=judge"], ["stge"], "stge (did you mean stage?)"),
        (["+model.caps.enn=5"], ["model.caps.enn"], "model.caps.enn (did you mean model.caps.en?)"),
        (["+model.reasonning=true"], ["model.reasonning"], "model.reasonning (did you mean model.reasoning?)"),
        (["judge_panel=paper", "+judge_panel.judges.qwen.rout=x"], ["judge_panel.judges.qwen.rout"],
         "judge_panel.judges.qwen.rout (did you mean judge_panel.judges.qwen.route?)"),
        (["+judge_panel.max_token=9"], ["judge_panel.max_token"],
         "judge_panel.max_token (did you mean judge_panel.max_tokens?)"),
        (["+retry.max_retry=1", "+cache.dirr=/tmp"], ["retry.max_retry", "cache.dirr"],
         "unknown config keys: retry.max_retry (did you mean retry.max_retries?); "
         "cache.dirr (did you mean cache.dir?)"),
    ],
)
def test_plus_typos_fail_naming_the_key_and_the_nearest_valid_one(overrides, unknown, message):
    """Hydra accepts these `+` additions; the check rejects every one, at every depth."""
    cfg = compose_config(overrides)
    assert unknown_keys(cfg) == unknown
    with pytest.raises(ConfigError) as info:
        prepare(cfg)
    assert message in str(info.value)


#: Gemini-2.5-Flash is retired on Google's host (docs/providers/routes.md): prepare() refuses it there,
#: not at a gateway.
GEMINI_FLASH_GATEWAY = "judge_panel.judges.gemini_flash.base_url=https://gateway.example"


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["judge_panel=paper", GEMINI_FLASH_GATEWAY],
        ["+judge@judge_panel.judges.extra=lexical", "judge_panel.judges.extra.name=second"],  # a legit new judge
        ["+model.extra_body.thinking.type=enabled", "+model.extra_body.reasoning_effort=high"],  # free-form level
        ["judge_panel=paper", GEMINI_FLASH_GATEWAY, "+judge_panel.judges.qwen.extra_body.enable_thinking=false"],
        ["decoding.temperature=0.3", "model=custom", "model.route=r"],
    ],
)
def test_known_keys_and_free_form_levels_pass(overrides):
    """Legit additions pass: a judge added from the judge group, extra_body's own keys."""
    cfg = compose_config(overrides)
    assert unknown_keys(cfg) == []
    prepare(cfg)


def test_a_new_judge_from_the_group_is_checked_against_the_judge_schema():
    """The judge's key is free, its fields are not."""
    cfg = compose_config(["+judge@judge_panel.judges.extra=lexical", "+judge_panel.judges.extra.timeout=5"])
    assert unknown_keys(cfg) == ["judge_panel.judges.extra.timeout"]
    assert "did you mean judge_panel.judges.extra.timeout_s?" in describe(
        "judge_panel.judges.extra.timeout", tuple(f.name for f in dataclasses.fields(JudgeConfig)))


def test_unknown_keys_on_plain_mappings_and_interpolations_left_alone():
    """A plain dict walks the same; an unset ${oc.env:…} is never resolved by the check."""
    node = {"model": {"name": "${oc.env:SURELY_UNSET_VAR_123}", "capz": {}}, "stage": "all"}
    assert unknown_keys(node, WildtraceConfig) == ["model.capz"]
    check_known_keys({"stage": "all"}, WildtraceConfig)


@pytest.mark.slow
def test_app_rejects_a_plus_typo_before_any_request(tmp_path):
    """`python -m wildtrace +decoding.temprature=0.3` against a live endpoint: exit 2, no request, no run."""
    with LoopbackServer(lambda call: chat("an answer")) as server:
        cmd = [sys.executable, "-m", "wildtrace", "+decoding.temprature=0.3", "model=custom", "model.route=m",
               f"model.base_url={server.url}/v1", "model.api_key_env=WT_TYPO_KEY", "progress=false"]
        env = {**os.environ, "WT_TYPO_KEY": "k", "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert server.calls == []
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown config key: decoding.temprature (did you mean decoding.temperature?)" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "outputs" / "mlflow.db").exists()


def _settings(overrides):
    return to_settings(compose_config(overrides))


@pytest.mark.parametrize(
    "overrides, codes",
    [
        ([], []),  # the offline default
        (["model=gpt-5.1"], []),  # reasoning, budget by rule: 32768
        (["model=gpt-5.1", "decoding.max_tokens=8192"], ["reasoning_budget"]),
        (["model=gpt-5.1", "decoding.max_tokens=32767"], ["reasoning_budget"]),
        (["model=gpt-5.1", "decoding.max_tokens=32768"], []),
        (["model=gpt-5.1", "decoding.max_tokens=8192", "stage=judge", "responses=r.json"], []),  # no answers made
        (["model=gpt-4.1", "decoding.max_tokens=4096"], []),  # not a reasoning model
        (["model=qwen3.5-plus", "judge_panel=paper"], ["judge_is_contestant"]),  # same route as judge qwen
        (["model=qwen3.5-plus", "judge_panel=paper", "stage=answer"], []),  # no judging in this run
        (["model=qwen3.5-plus", "judge_panel=paper_without_qwen"], []),
        (["model=custom", "model.route=claude-sonnet-4-6", "judge_panel=paper"], ["judge_is_contestant"]),
        (["model=custom", "model.route=anthropic/Claude-Sonnet-4-6-20260217", "judge_panel=paper"],
         ["judge_is_contestant"]),
        (["model=custom", "model.route=x", "model.name=Gemini-2.5-Flash", "judge_panel=paper"],
         ["judge_is_contestant"]),  # same name
        (["model=custom", "model.route=claude-sonnet-4-5", "judge_panel=paper"], []),  # another version
        (["model=gemini-2.5-pro", "judge_panel=paper"], []),  # same family, not the same model
        (["model=custom", "model.route=mr.claude-sonnet-4-6", "model.reasoning=true", "decoding.max_tokens=16000",
          "judge_panel=paper"], ["reasoning_budget", "judge_is_contestant"]),
    ],
)
def test_spec_warnings(overrides, codes):
    """Table-driven: which of the spec's two warnings fire."""
    warnings = spec_warnings(_settings(overrides))
    assert [code for code, _ in warnings] == codes


def test_spec_warning_messages():
    """The messages name the model, the budget, the spec's figure and the judge."""
    (_code, budget), = spec_warnings(_settings(["model=gpt-5.1", "decoding.max_tokens=8192"]))
    assert budget == ("model gpt-5.1 is a reasoning model (model.reasoning=true) given a budget of 8192 tokens: "
                      "the spec (§2) asks for 32768; reasoning models truncated below this lose ~7pp")
    (_code, panel), = spec_warnings(_settings(["model=qwen3.5-plus", "judge_panel=paper"]))
    assert panel == ("model qwen3.5-plus (route qwen3.5-plus) is also judge qwen (route qwen3.5-plus): "
                     "the spec's judges (§4) are not on the leaderboard")


@pytest.mark.parametrize(
    "text, identity",
    [
        ("mr.claude-sonnet-4-6-20260217", "claude-sonnet-4-6"),
        ("Claude-Sonnet-4-6", "claude-sonnet-4-6"),
        ("anthropic/claude-sonnet-4-6@20260217", "claude-sonnet-4-6"),
        ("gpt-4.1-2025-04-14", "gpt-4.1"),
        ("qwen3.5-plus", "qwen3.5-plus"),  # a version dot is not a gateway prefix
        ("gemini-2.5-flash", "gemini-2.5-flash"),
        ("  ", ""),
        (None, ""),
    ],
)
def test_model_identity(text, identity):
    assert model_identity(text) == identity


# ---------------------------------------------------------------------------------------------
# The entry point's logging: process messages to stderr and app.log, the headline printed and logged.

def test_console_handler_moves_to_stderr_and_skips_the_headline(tmp_path):
    """Hydra's console handler (stdout) is pointed at stderr; the file handler is left alone."""
    import io
    import logging

    from wildtrace.app import HEADLINE_LOG, route_console_to_stderr

    root = logging.Logger("test-root")
    console, file_handler = logging.StreamHandler(sys.stdout), logging.FileHandler(tmp_path / "app.log")
    root.addHandler(console)
    root.addHandler(file_handler)
    route_console_to_stderr(root)
    route_console_to_stderr(root)  # idempotent: one filter
    assert console.stream is sys.stderr and len(console.filters) == 1
    assert file_handler.stream.name == str(tmp_path / "app.log")
    console.setStream(io.StringIO())
    for name in ("wildtrace", HEADLINE_LOG):
        root.handle(logging.LogRecord(name, logging.INFO, __file__, 1, f"from {name}", None, None))
    file_handler.close()
    assert console.stream.getvalue() == "from wildtrace\n"
    assert (tmp_path / "app.log").read_text() == f"from wildtrace\nfrom {HEADLINE_LOG}\n"


@pytest.mark.slow
def test_stdout_is_the_headline_and_app_log_ends_with_it(tmp_path):
    """Piped: stdout holds only the headline; the job log holds it as its last record."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "WILDTRACE_"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "wildtrace", "mlflow.enabled=false", "dataset.limit=2"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["wildtrace 0.1.0", "overall (All view)",
                                                       "scored 2 · unscored 0 · failed 0 · out of context 0 · "
                                                       "missing 0 · of 2", "calls", "cost", "run dir"]
    run_dir = Path(lines[-1].removeprefix("run dir: "))
    log_text = (run_dir / "app.log").read_text()
    assert "[wildtrace.headline][INFO] - " + "\n".join(lines) in log_text
    assert log_text.rstrip().endswith(lines[-1])


@pytest.mark.parametrize("override", ["judge_panel.judges={}", "judge_panel.judges=null", "+judge_panel.judges={}"])
def test_an_empty_panel_override_is_refused_naming_the_key(override):
    from wildtrace.config.checks import check_overrides

    with pytest.raises(ConfigError, match=r"judge_panel.judges cannot be emptied this way"):
        check_overrides([override])


def test_other_overrides_pass_the_override_check():
    from wildtrace.config.checks import check_overrides

    check_overrides(["~judge_panel.judges.qwen", "model.extra_body={}", "judge_panel=paper"])
