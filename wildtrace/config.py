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
from wildtrace.providers.base import check_reasoning
from wildtrace.runtime.retry import MAX_RETRIES

PROVIDERS = ("openai", "anthropic", "gemini", "offline")
STAGES = ("all", "answer", "judge")
BUDGET_FIELDS = ("max_tokens", "max_completion_tokens")
#: The temperature range each wire format accepts (Anthropic's Messages API takes 0–1).
TEMPERATURE_RANGE = {"openai": (0.0, 2.0), "anthropic": (0.0, 1.0), "gemini": (0.0, 2.0), "offline": (0.0, 2.0)}
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

    #: A display name (the model's or judge's family and version).
    name: str = MISSING
    #: The wire format: openai (and every OpenAI-compatible route), anthropic, gemini, offline.
    provider: str = MISSING
    #: The model id sent to the endpoint.
    route: str = MISSING
    #: The API's base URL; requests go to {base_url}/chat/completions, /v1/messages, /v1beta/models/…
    base_url: str = MISSING
    #: The variable ``base_url`` is read from, named in the error when it is unset (no public default).
    base_url_env: Optional[str] = None
    #: The NAME of the environment variable holding the key (never the key itself).
    api_key_env: Optional[str] = None
    #: Spec §2: send temperature only to endpoints that accept it.
    send_temperature: bool = True
    #: Stream responses (server-sent events); false for endpoints that cannot.
    stream: bool = True
    #: How the OpenAI-compatible dialect reads decoding.reasoning_effort (null = the wire format's own).
    reasoning_format: Optional[str] = None
    #: Requests in flight at once (the adaptive limit may go lower under rate limits, never higher).
    max_concurrency: int = 16
    #: The longest silence allowed on the connection: between bytes when streamed, for the whole body if not.
    timeout_s: float = 600.0
    #: The longest one attempt may take, start to end.
    max_call_s: float = 3600.0
    #: A mapping merged into every request body (provider-specific options).
    extra_body: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelConfig(EndpointConfig):
    """The model under test: an endpoint plus its budget rule and context caps."""

    #: A reasoning model: the spec's 32768-token budget (else 8192).
    reasoning: bool = False
    #: Where the budget goes: max_tokens, or max_completion_tokens (OpenAI's reasoning models).
    budget_field: str = "max_tokens"
    #: Spec §3 context caps in characters.
    caps: CapsConfig = field(default_factory=CapsConfig)
    #: Long answers from reasoning models on million-character prompts stay silent for minutes.
    timeout_s: float = 900.0


@dataclass
class DecodingConfig:
    """Answer decoding (spec §2). ``max_tokens: null`` = 32768 if reasoning else 8192."""

    #: Spec §2: 0.1 for models that accept temperature.
    temperature: float = 0.1
    #: The completion budget; null = 32768 for reasoning models, else 8192.
    max_tokens: Optional[int] = None
    #: Reasoning effort (none, minimal, low, medium, high, xhigh); null sends nothing (the provider's default).
    reasoning_effort: Optional[str] = None
    #: > 0 asks for fresh answer calls (a rerun that is not served from the cache).
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
class GatewayConfig:
    """Spec §6's single-gateway setup: every endpoint at one OpenAI-compatible URL, one key."""

    #: On: the model and every judge go to ``base_url`` with ``api_key_env``, routes unchanged.
    enabled: bool = False
    #: The gateway's OpenAI-compatible base URL (…/v1).
    base_url: Optional[str] = None
    #: The NAME of the variable holding the gateway's bearer token.
    api_key_env: str = "API_KEY"


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
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    #: all | answer | judge
    stage: str = "all"
    #: With stage=judge: a responses.json (or JSON rows) to judge.
    responses: Optional[str] = None
    #: The run directory (Hydra's, set by the entry point).
    out_dir: Optional[str] = None
    #: Show a progress bar on a terminal (a progress line every progress_every_s elsewhere).
    progress: bool = True
    #: Seconds between progress lines when stderr is not a terminal.
    progress_every_s: float = 30.0
    #: A response body past this many MiB fails the call (response_too_large), its bytes not kept.
    max_response_mb: float = 64.0
    #: After SIGINT/SIGTERM or a storage failure: seconds in-flight calls may take to finish.
    stop_grace_s: float = 10.0
    #: Everything a run writes lives under this absolute folder.
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


def _check_endpoint(prefix: str, e: EndpointConfig) -> None:
    if e.provider not in PROVIDERS:
        raise ConfigError(f"{prefix}.provider: unknown provider {e.provider!r} (choose from {', '.join(PROVIDERS)})")
    if e.max_concurrency < 1:
        raise ConfigError(f"{prefix}.max_concurrency must be at least 1, got {e.max_concurrency}")
    for name in ("timeout_s", "max_call_s"):
        value = getattr(e, name)
        if not value > 0 or value != value:
            raise ConfigError(f"{prefix}.{name} must be positive, got {value}")
    if not e.base_url or not e.base_url.strip():
        hint = f"set {e.base_url_env} (this endpoint has no public default: nothing is sent to a host nobody named)" \
            if e.base_url_env else "set it to the API's base URL"
        raise ConfigError(f"{prefix}.base_url is empty: {hint}")
    if not e.base_url.startswith(("http://", "https://")):
        raise ConfigError(f"{prefix}.base_url must start with http:// or https://, got {e.base_url!r}")
    try:
        check_reasoning(e.provider, e.reasoning_format, None)
    except ValueError as exc:
        raise ConfigError(f"{prefix}.reasoning_format: {exc}") from None


def _check_temperature(key: str, temperature: float, providers: dict[str, str]) -> None:
    for where, provider in providers.items():
        low, high = TEMPERATURE_RANGE.get(provider, (0.0, 2.0))
        if not low <= temperature <= high:
            raise ConfigError(f"{key} must be within [{low}, {high}] for {where} ({provider}), got {temperature}")


def apply_gateway(cfg: WildtraceConfig) -> WildtraceConfig:
    """access=gateway: point the model and every judge at one OpenAI-compatible URL and key."""
    g = cfg.gateway
    if not g.enabled:
        return cfg
    if not g.base_url:
        raise ConfigError("gateway.base_url is empty: access=gateway needs gateway.base_url=http(s)://…/v1")
    endpoints: list[EndpointConfig] = [cfg.model, *cfg.judge_panel.judges.values()]
    for e in endpoints:
        if e.provider == "offline":
            continue
        e.provider, e.base_url, e.api_key_env, e.base_url_env = "openai", g.base_url, g.api_key_env, None
    return cfg


def validate(cfg: WildtraceConfig) -> WildtraceConfig:
    """Checks a schema cannot express; each error names the key."""
    apply_gateway(cfg)
    if cfg.stage != "judge":
        _check_endpoint("model", cfg.model)
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
        if cfg.stage != "answer":
            _check_endpoint(f"judge_panel.judges.{key}", judge)
    if cfg.stage not in STAGES:
        raise ConfigError(f"stage must be one of {', '.join(STAGES)}, got {cfg.stage!r}")
    if cfg.stage != "answer" and not cfg.judge_panel.judges:
        raise ConfigError(f"judge_panel.judges is empty: stage={cfg.stage} needs at least one judge")
    if cfg.stage == "judge" and not cfg.responses:
        raise ConfigError("stage=judge needs responses=PATH (a responses.json, or a JSON list of rows)")
    if cfg.decoding.replicate < 0 or cfg.judge_panel.replicate < 0:
        raise ConfigError("decoding.replicate and judge_panel.replicate must be >= 0")
    try:
        check_reasoning(cfg.model.provider, None, cfg.decoding.reasoning_effort)
    except ValueError as exc:
        raise ConfigError(f"decoding.reasoning_effort: {exc}") from None
    if cfg.stage != "judge" and cfg.model.send_temperature:
        _check_temperature("decoding.temperature", cfg.decoding.temperature, {"model": cfg.model.provider})
    if cfg.stage != "answer":
        _check_temperature("judge_panel.temperature", cfg.judge_panel.temperature,
                           {f"judge_panel.judges.{k}": j.provider for k, j in cfg.judge_panel.judges.items()
                            if j.send_temperature})
    r = cfg.retry
    if not 0 <= r.max_retries <= MAX_RETRIES:
        raise ConfigError(f"retry.max_retries must be between 0 and {MAX_RETRIES} (0 = no retries; the spec's "
                          f"rule is 5), got {r.max_retries}")
    for name in ("backoff_base_s", "backoff_max_s", "retry_after_max_s"):
        value = getattr(r, name)
        if not value >= 0:
            raise ConfigError(f"retry.{name} must be >= 0, got {value}")
    for name in ("max_response_mb", "stop_grace_s", "progress_every_s"):
        value = getattr(cfg, name)
        if not value > 0:
            raise ConfigError(f"{name} must be positive, got {value}")
    return cfg


def to_settings(dict_cfg: Any) -> WildtraceConfig:
    """DictConfig → validated WildtraceConfig: the one conversion, at the entry point."""
    obj = OmegaConf.to_object(dict_cfg)
    if not isinstance(obj, WildtraceConfig):  # composed without the schema (should not happen)
        merged = OmegaConf.merge(OmegaConf.structured(WildtraceConfig), dict_cfg)
        obj = OmegaConf.to_object(merged)
    return validate(obj)
