"""Structured-config schemas: the typed shape of every composed run.

Registered in Hydra's ConfigStore as ``wildtrace_schema`` (the root of conf/config.yaml's
defaults list), so a typo or a wrong type fails at compose time, naming the key. The
entry point converts the DictConfig once (``to_settings``) and passes these dataclasses
inward; nothing below the entry point touches OmegaConf.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Optional

from omegaconf import MISSING, OmegaConf

from wildtrace.core.caps import Caps

PROVIDERS = ("openai", "anthropic", "gemini", "offline")
STAGES = ("all", "answer", "judge")
BUDGET_FIELDS = ("max_tokens", "max_completion_tokens")
#: Judge keys are plain identifiers so that ``judge_panel.judges.<key>.x=`` and
#: ``~judge_panel.judges.<key>`` work on the command line.
JUDGE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
#: The spec's completion budgets (§2).
REASONING_BUDGET, DEFAULT_BUDGET = 32768, 8192


class ConfigError(ValueError):
    """A composed config that cannot run; the message names the key."""


@dataclass
class CapsConfig:
    """Context caps in characters (spec §3): en, and cjk for CJK documents."""

    en: int = 2_850_000
    cjk: int = 850_000


@dataclass
class EndpointConfig:
    """What every endpoint has. ``api_key_env`` is the NAME of the env var, never the key."""

    name: str = MISSING
    provider: str = MISSING
    route: str = MISSING
    base_url: str = MISSING
    api_key_env: Optional[str] = None
    send_temperature: bool = True
    max_concurrency: int = 16
    timeout_s: float = 600.0
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelConfig(EndpointConfig):
    """The model under test: an endpoint plus its budget rule and context caps."""

    reasoning: bool = False
    budget_field: str = "max_tokens"
    caps: CapsConfig = field(default_factory=CapsConfig)
    timeout_s: float = 900.0  # long answers from reasoning models on million-character prompts


@dataclass
class DecodingConfig:
    """Answer decoding (spec §2). ``max_tokens: null`` = 32768 if reasoning else 8192."""

    temperature: float = 0.1
    max_tokens: Optional[int] = None
    replicate: int = 0


@dataclass
class JudgeConfig(EndpointConfig):
    """One judge endpoint."""


@dataclass
class JudgePanelConfig:
    """The judge panel (spec §4): settings shared by all judges, and the judges by key."""

    name: str = MISSING
    temperature: float = 0.1
    max_tokens: int = 16384
    replicate: int = 0
    judges: dict[str, JudgeConfig] = field(default_factory=dict)


@dataclass
class DatasetConfig:
    """Which tasks: a tasks file, its corpus folder, and an optional subset."""

    name: str = MISSING
    tasks: str = MISSING
    corpus: str = MISSING
    limit: Optional[int] = None
    ids: Optional[list[str]] = None


@dataclass
class RetryConfig:
    """Transient-error retries (spec §2: up to 5, with backoff)."""

    max_retries: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 300.0


@dataclass
class CacheConfig:
    """The outcome cache that makes reruns and resumes free."""

    dir: str = MISSING
    enabled: bool = True


@dataclass
class MlflowConfig:
    """Where runs are logged. The default is an absolute SQLite URI under outputs/."""

    enabled: bool = True
    tracking_uri: str = MISSING
    experiment: str = "wildtrace"
    #: None: beside a local store (outputs/mlartifacts); a tracking server's own default.
    artifact_location: Optional[str] = None
    #: Log each document the run used once, under documents/ (never once per task).
    log_documents: bool = True


@dataclass
class WildtraceConfig:
    """The whole run."""

    model: ModelConfig = MISSING
    decoding: DecodingConfig = MISSING
    judge_panel: JudgePanelConfig = MISSING
    dataset: DatasetConfig = MISSING
    retry: RetryConfig = field(default_factory=RetryConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    stage: str = "all"
    responses: Optional[str] = None
    out_dir: Optional[str] = None
    progress: bool = True
    root: str = MISSING


def package_data(relative: str) -> str:
    """Absolute path of a file shipped inside the package (the bundled sample)."""
    return str(resources.files("wildtrace").joinpath("data", relative))


def register() -> None:
    """Register the schema and the resolvers. Safe to call more than once."""
    from hydra.core.config_store import ConfigStore

    if not OmegaConf.has_resolver("wt.abspath"):
        OmegaConf.register_new_resolver("wt.abspath", lambda p: os.path.abspath(os.path.expanduser(p)))
    if not OmegaConf.has_resolver("wt.package_data"):
        OmegaConf.register_new_resolver("wt.package_data", package_data)
    ConfigStore.instance().store(name="wildtrace_schema", node=WildtraceConfig)


def effective_max_tokens(model: ModelConfig, decoding: DecodingConfig) -> int:
    """The completion budget sent: decoding.max_tokens, else 32768 for reasoning models, else 8192."""
    if decoding.max_tokens is not None:
        return decoding.max_tokens
    return REASONING_BUDGET if model.reasoning else DEFAULT_BUDGET


def caps_of(model: ModelConfig) -> Caps:
    """The core's Caps value for a model config."""
    return Caps(en=model.caps.en, cjk=model.caps.cjk)


def _check_endpoint(prefix: str, provider: str, max_concurrency: int, timeout_s: float) -> None:
    if provider not in PROVIDERS:
        raise ConfigError(f"{prefix}.provider: unknown provider {provider!r} (choose from {', '.join(PROVIDERS)})")
    if max_concurrency < 1:
        raise ConfigError(f"{prefix}.max_concurrency must be at least 1, got {max_concurrency}")
    if timeout_s <= 0:
        raise ConfigError(f"{prefix}.timeout_s must be positive, got {timeout_s}")


def validate(cfg: WildtraceConfig) -> WildtraceConfig:
    """Checks a schema cannot express; each error names the key."""
    _check_endpoint("model", cfg.model.provider, cfg.model.max_concurrency, cfg.model.timeout_s)
    if cfg.model.budget_field not in BUDGET_FIELDS:
        raise ConfigError(f"model.budget_field must be one of {BUDGET_FIELDS}, got {cfg.model.budget_field!r}")
    if cfg.model.caps.en < 1 or cfg.model.caps.cjk < 1:
        raise ConfigError("model.caps.en and model.caps.cjk must be positive character counts")
    if cfg.decoding.max_tokens is not None and cfg.decoding.max_tokens < 1:
        raise ConfigError(f"decoding.max_tokens must be positive or null, got {cfg.decoding.max_tokens}")
    if cfg.judge_panel.max_tokens < 1:
        raise ConfigError(f"judge_panel.max_tokens must be positive, got {cfg.judge_panel.max_tokens}")
    for key, judge in cfg.judge_panel.judges.items():
        if not JUDGE_KEY.match(key):
            raise ConfigError(f"judge_panel.judges: key {key!r} must use only letters, digits, '_' and '-'")
        _check_endpoint(f"judge_panel.judges.{key}", judge.provider, judge.max_concurrency, judge.timeout_s)
    if cfg.stage not in STAGES:
        raise ConfigError(f"stage must be one of {', '.join(STAGES)}, got {cfg.stage!r}")
    if cfg.stage != "answer" and not cfg.judge_panel.judges:
        raise ConfigError(f"judge_panel.judges is empty: stage={cfg.stage} needs at least one judge")
    if cfg.stage == "judge" and not cfg.responses:
        raise ConfigError("stage=judge needs responses=PATH (a responses.json, or a JSON list of rows)")
    if cfg.decoding.replicate < 0 or cfg.judge_panel.replicate < 0:
        raise ConfigError("decoding.replicate and judge_panel.replicate must be >= 0")
    return cfg


def to_settings(dict_cfg: Any) -> WildtraceConfig:
    """DictConfig → validated WildtraceConfig: the one conversion, at the entry point."""
    obj = OmegaConf.to_object(dict_cfg)
    if not isinstance(obj, WildtraceConfig):  # composed without the schema (should not happen)
        merged = OmegaConf.merge(OmegaConf.structured(WildtraceConfig), dict_cfg)
        obj = OmegaConf.to_object(merged)
    return validate(obj)
