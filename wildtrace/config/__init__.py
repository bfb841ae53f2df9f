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
from typing import Any, Optional, cast

from omegaconf import MISSING, OmegaConf

from wildtrace.core.caps import Caps
from wildtrace.core.cost import Price
from wildtrace.providers.base import check_family, check_level
from wildtrace.providers.registry import PROVIDERS, batch_providers, provider_class
from wildtrace.runtime.net.retry import MAX_RETRIES

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
class RetiredConfig:
    """The paper's exact model is gone from the first-party API (docs/providers/routes.md): refused before any request.

    It applies while the endpoint's route is one of ``routes`` (dates and gateway prefixes
    aside) and its base_url's host is one of ``hosts`` (the provider's own API): pointing
    the endpoint at a gateway that still serves the model (``base_url=…``, access=gateway,
    or the file's ``*_BASE_URL`` variable) or choosing another route runs it.
    """

    #: When the first-party API stopped serving it (YYYY-MM-DD, as the provider announced it).
    date: str = MISSING
    #: What the refusal says (the provider's notice, what the route answers now).
    message: str = MISSING
    #: The retired route ids.
    routes: list[str] = field(default_factory=list)
    #: The first-party API hosts where it is retired.
    hosts: list[str] = field(default_factory=list)
    #: Where it is still served ("host: route"), as far as read; empty when none was confirmed.
    served_by: list[str] = field(default_factory=list)
    #: The page(s) read, with the date read.
    source: Optional[str] = None


#: OpenAI's ``prompt_cache_retention`` values (null: send none; the provider's default, in memory).
PROMPT_CACHE_RETENTIONS = (None, "in_memory", "24h")

#: ``served_model.on_mismatch`` values.
ON_MISMATCH = ("warn", "fail")


@dataclass
class ServedModelConfig:
    """What the responses' served model must be (docs/providers/routes.md).

    A judge served by another model is unavailable.
    """

    #: A regular expression the served model must match in full (case aside); null = derived from the route.
    expect: Optional[str] = None
    #: warn | fail; null = fail for a judge, warn for the model.
    on_mismatch: Optional[str] = None


@dataclass
class PriceConfig:
    """An endpoint's price (USD per million tokens, as the provider's pricing page lists it; docs/providers/cost.md).

    Every field may be null: a price nobody confirmed stays unknown, and so does every cost made from it.
    """

    #: Input tokens (not read from the provider's prompt cache).
    input_per_mtok: Optional[float] = None
    #: Output tokens; reasoning tokens are billed as output.
    output_per_mtok: Optional[float] = None
    #: Input tokens read from the provider's prompt cache.
    cached_input_per_mtok: Optional[float] = None
    #: Input written to the prompt cache for its default lifetime, where a write costs more (Anthropic: 5 minutes).
    cache_write_per_mtok: Optional[float] = None
    #: Input written to the prompt cache for one hour (Anthropic's ``ttl: 1h``).
    cache_write_1h_per_mtok: Optional[float] = None
    #: A long-context tier: a request with more input tokens than this is billed whole at the multipliers.
    above_input_tokens: Optional[int] = None
    #: The tier's factor on input (and cached input) prices.
    input_multiplier: Optional[float] = None
    #: The tier's factor on the output price.
    output_multiplier: Optional[float] = None
    #: The fraction taken off a batched call (0.5 = half price); null where the provider offers none.
    batch_discount: Optional[float] = None
    #: Where the price was read (the pricing page's address).
    source: Optional[str] = None
    #: The date it was read (YYYY-MM-DD).
    as_of: Optional[str] = None


@dataclass
class EndpointConfig:
    """What every endpoint has. ``api_key_env`` is the NAME of the env var, never the key."""

    #: A display name (the model's or judge's family and version).
    name: str = MISSING
    #: The model family (claude, qwen, gemini, gpt, …): the report's judge-family check compares a judge's
    #: scores on contestants of its own family with the others'; null = unknown (the check is not shown).
    family: Optional[str] = None
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
    #: Requests in flight at once (under a rate limit the sends are paced, the bound unchanged).
    max_concurrency: int = 16
    #: The longest silence allowed on the connection: between bytes when streamed, for the whole body if not.
    timeout_s: float = 600.0
    #: The longest one attempt may take, start to end.
    max_call_s: float = 3600.0
    #: A mapping merged into every request body (provider-specific options).
    extra_body: dict[str, Any] = field(default_factory=dict)
    #: Set when the paper's exact model is retired from the first-party API (refused there before any request).
    retired: Optional[RetiredConfig] = None
    #: The served-model rule: a response naming another model is warned about or refused.
    served_model: ServedModelConfig = field(default_factory=ServedModelConfig)
    #: What the endpoint costs (docs/providers/cost.md); null fields: unknown, and so is the cost.
    price: PriceConfig = field(default_factory=PriceConfig)
    #: A spend cap for this endpoint alone, in USD (null: none); see budget.max_usd.
    max_usd: Optional[float] = None
    #: Send this endpoint's calls through the provider's batch API (openai, anthropic, gemini): docs/providers/batch.md.
    batch: bool = False
    #: OpenAI: send ``prompt_cache_key`` (the prompt's sha256) so repeats of a prompt reach the server that
    #: holds its prefix; a cache hint, never part of the harness's cache key (docs/providers/cost.md).
    prompt_cache_key: bool = False
    #: OpenAI: ``prompt_cache_retention`` (in_memory or 24h) where the model offers it; null sends nothing.
    prompt_cache_retention: Optional[str] = None


@dataclass
class ModelConfig(EndpointConfig):
    """The model under test: an endpoint plus its budget rule and context caps."""

    #: A reasoning model: the spec's 32768-token budget (else 8192).
    reasoning: bool = False
    #: Where the budget goes: max_tokens, or max_completion_tokens (OpenAI's reasoning models).
    budget_field: str = "max_tokens"
    #: Spec §3 context caps in characters.
    caps: Caps = field(default_factory=Caps)
    #: Long answers from reasoning models on million-character prompts stay silent for minutes.
    timeout_s: float = 900.0
    #: The provider's documented output-token limit (null = not documented/checked); the spec's
    #: budget is still sent, and a run whose budget exceeds it warns (config_check.output_limit_warning);
    #: a call the provider rejects for its budget is sent again with this limit (docs/providers/providers-dialects.md).
    max_output_tokens: Optional[int] = None
    #: Where that limit is documented (named in the warning).
    max_output_tokens_source: Optional[str] = None


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

    #: The panel's name (the group file's: paper, offline, offline_panel, …).
    name: str = MISSING
    #: Every judge's temperature (spec §4: 0.1); sent only where the judge's send_temperature is true.
    temperature: float = 0.1
    #: Every judge's completion budget (spec §4: 16384).
    max_tokens: int = 16384
    #: Which grading of the same answers this is: a new replicate asks every judge again (0 = the first).
    replicate: int = 0
    #: Every judge through its provider's batch API (as ``judges.<key>.batch=true`` for each).
    batch: bool = False
    #: The judges by key (``judge_panel.judges.<key>.…`` on the command line; ``~judge_panel.judges.<key>`` drops one).
    judges: dict[str, JudgeConfig] = field(default_factory=dict)


@dataclass
class DatasetConfig:
    """Which tasks: a tasks file, its corpus folder, and an optional subset."""

    #: The dataset's name (the group file's: sample, wildtrace).
    name: str = MISSING
    #: The tasks file (JSON: the release's records, each with question_text, corpus_file and ground_truth).
    tasks: str = MISSING
    #: The folder holding each task's corpus_file.
    corpus: str = MISSING
    #: Only the first N tasks (null = all).
    limit: Optional[int] = None
    #: Only these question ids (null = all).
    ids: Optional[list[str]] = None


@dataclass
class RetryConfig:
    """Transient-error retries (spec §2: up to 5, with backoff)."""

    #: Retries of a transient failure (408/429/5xx/transport) after the first attempt: 0–100, the spec's 5.
    max_retries: int = 5
    #: The first backoff's ceiling in seconds; it doubles each retry (a random 50–100 % of it is waited).
    backoff_base_s: float = 1.0
    #: The largest backoff ceiling, in seconds.
    backoff_max_s: float = 60.0
    #: A server's Retry-After is honoured up to this many seconds.
    retry_after_max_s: float = 300.0


@dataclass
class BatchConfig:
    """Batch mode's waiting (docs/providers/batch.md): how often a pending batch is polled, and for how long."""

    #: Seconds between two polls of a pending batch.
    poll_s: float = 60.0
    #: The longest wait for one batch, from its creation (the providers' window is 24 h).
    max_wait_h: float = 24.0


@dataclass
class CacheConfig:
    """The outcome cache that makes reruns and resumes free."""

    #: The cache folder: one JSON file per outcome, named by the sha256 of what decides it; runs may share it.
    dir: str = MISSING
    #: False: nothing is read from or stored in the cache (every call is sent).
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

    #: Log every run to MLflow while it runs (false: run files only; upload logs them later).
    enabled: bool = True
    #: The MLflow store: sqlite:///… (the default, under outputs/) or a tracking server's http(s)://….
    tracking_uri: str = MISSING
    #: The MLflow experiment runs are logged to.
    experiment: str = "wildtrace"
    #: None: beside a local store (outputs/mlartifacts); a tracking server's own default.
    artifact_location: Optional[str] = None
    #: Log each document the run used once, under documents/ (never once per task).
    log_documents: bool = True
    #: A run that is not logged fails: a local store that cannot be opened stops it before any
    #: request (exit 2), logging that fails later ends it with exit 3 (its files are kept, for
    #: upload). False: one warning, the run goes on unlogged, its exit status is its own.
    required: bool = True


@dataclass
class BudgetConfig:
    """The whole run's spend cap (docs/providers/cost.md): no call is sent whose worst case would pass it."""

    #: USD for every endpoint of the run together; null: no cap.
    max_usd: Optional[float] = None


@dataclass
class EstimateConfig:
    """``python -m wildtrace.estimate``: the low end of the output range (the high end is max_tokens)."""

    #: A typical answer's output tokens (reasoning included): the low estimate of each answer call.
    answer_tokens: int = 1500
    #: A typical judge reply's output tokens: the low estimate of each judge call.
    judge_tokens: int = 600


@dataclass
class WildtraceConfig:
    """The whole run."""

    #: The model under test (group ``model``: one file per row of the spec's caps table, or custom).
    model: ModelConfig = MISSING
    #: The answers' decoding (group ``decoding``: the spec's temperature and budgets).
    decoding: DecodingConfig = MISSING
    #: The judges (group ``judge_panel``: paper, offline, offline_panel, and the ablations).
    judge_panel: JudgePanelConfig = MISSING
    #: The tasks (group ``dataset``: sample, wildtrace).
    dataset: DatasetConfig = MISSING
    #: Transient-error retries.
    retry: RetryConfig = field(default_factory=RetryConfig)
    #: The outcome cache.
    cache: CacheConfig = field(default_factory=CacheConfig)
    #: MLflow logging.
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    #: One gateway for every endpoint (group ``access=gateway``).
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    #: The whole run's spend cap (docs/providers/cost.md).
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    #: What ``wildtrace.estimate`` assumes of replies not yet seen (docs/providers/cost.md).
    estimate: EstimateConfig = field(default_factory=EstimateConfig)
    #: Batch mode's polling and longest wait (which endpoints: model.batch, judge_panel.batch).
    batch: BatchConfig = field(default_factory=BatchConfig)
    #: all | answer | judge
    stage: str = "all"
    #: With stage=judge: a responses.json (or JSON rows) to judge.
    responses: Optional[str] = None
    #: The run directory (Hydra's, set by the entry point).
    out_dir: Optional[str] = None
    #: How many jobs of this run's sweep send each answer prompt (set by the entry point in a multirun:
    #: the sizes of its decoding.* sweeps multiplied); above 1 the prompt is marked for the provider's
    #: prompt cache where a write costs extra (Anthropic's cache_control; docs/providers/cost.md).
    prompt_repeats: int = 1
    #: The other decoding points of this job's sweep (set by the entry point in a multirun): each task's
    #: answers at these points are sent right after this job's own, while the provider holds the prompt,
    #: and stored in the shared cache where the other jobs find them (docs/providers/cost.md).
    sweep_decodings: list[DecodingConfig] = field(default_factory=list)
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


def price_of(e: EndpointConfig) -> Price:
    """The core's Price value for an endpoint config (source and date are for people, not sums)."""
    p = e.price
    return Price(p.input_per_mtok, p.output_per_mtok, p.cached_input_per_mtok,
                 cache_write_per_mtok=p.cache_write_per_mtok, cache_write_1h_per_mtok=p.cache_write_1h_per_mtok,
                 above_input_tokens=p.above_input_tokens, input_multiplier=p.input_multiplier,
                 output_multiplier=p.output_multiplier, batch_discount=p.batch_discount)


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
        PROVIDERS[e.provider].check_reasoning(e.reasoning_format, None, e.route)
    except ValueError as exc:
        raise ConfigError(f"{prefix}.reasoning_format: {exc}") from None


def _check_price(prefix: str, e: EndpointConfig) -> None:
    p = e.price
    if e.prompt_cache_retention not in PROMPT_CACHE_RETENTIONS:
        raise ConfigError(f"{prefix}.prompt_cache_retention must be one of "
                          f"{', '.join(str(r) for r in PROMPT_CACHE_RETENTIONS)}, got {e.prompt_cache_retention!r}")
    for name in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok",
                 "cache_write_1h_per_mtok"):
        value = getattr(p, name)
        if value is not None and not (value >= 0 and value != float("inf")):
            raise ConfigError(f"{prefix}.price.{name} must be a non-negative number of USD or null, got {value}")
    for name in ("input_multiplier", "output_multiplier"):
        value = getattr(p, name)
        if value is not None and not (1 <= value < float("inf")):
            raise ConfigError(f"{prefix}.price.{name} must be at least 1 (a tier costs more), got {value}")
    if p.above_input_tokens is not None and p.above_input_tokens < 0:
        raise ConfigError(f"{prefix}.price.above_input_tokens must be >= 0 or null, got {p.above_input_tokens}")
    if p.batch_discount is not None and not 0 <= p.batch_discount < 1:
        raise ConfigError(f"{prefix}.price.batch_discount must be within [0, 1), got {p.batch_discount}")
    if e.max_usd is not None and not e.max_usd > 0:
        raise ConfigError(f"{prefix}.max_usd must be positive or null, got {e.max_usd}")


def _check_temperature(key: str, temperature: float, providers: dict[str, str]) -> None:
    for where, provider in providers.items():
        low, high = provider_class(provider).temperature_range
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
        if provider_class(e.provider).local:
            continue
        e.provider, e.base_url, e.api_key_env, e.base_url_env = "openai", g.base_url, g.api_key_env, None
    return cfg


def _check_family(prefix: str, e: EndpointConfig) -> None:
    if e.family is not None and (not isinstance(e.family, str) or not e.family.strip() or e.family != e.family.strip()):
        raise ConfigError(f"{prefix}.family must be a family name such as qwen or null (unknown), got {e.family!r}")


def validate(cfg: WildtraceConfig) -> WildtraceConfig:
    """Checks a schema cannot express; each error names the key."""
    apply_gateway(cfg)
    _check_family("model", cfg.model)
    for key, judge in cfg.judge_panel.judges.items():
        _check_family(f"judge_panel.judges.{key}", judge)
    if cfg.stage != "judge":
        _check_endpoint("model", cfg.model)
    _check_price("model", cfg.model)
    for key, judge in cfg.judge_panel.judges.items():
        _check_price(f"judge_panel.judges.{key}", judge)
    if cfg.budget.max_usd is not None and not cfg.budget.max_usd > 0:
        raise ConfigError(f"budget.max_usd must be positive or null, got {cfg.budget.max_usd}")
    if cfg.estimate.answer_tokens < 0 or cfg.estimate.judge_tokens < 0:
        raise ConfigError("estimate.answer_tokens and estimate.judge_tokens must be >= 0")
    if cfg.model.budget_field not in BUDGET_FIELDS:
        raise ConfigError(f"model.budget_field must be one of {BUDGET_FIELDS}, got {cfg.model.budget_field!r}")
    if cfg.model.caps.en < 1 or cfg.model.caps.cjk < 1:
        raise ConfigError("model.caps.en and model.caps.cjk must be positive character counts")
    if cfg.decoding.max_tokens is not None and cfg.decoding.max_tokens < 1:
        raise ConfigError(f"decoding.max_tokens must be positive or null, got {cfg.decoding.max_tokens}")
    if cfg.model.max_output_tokens is not None and cfg.model.max_output_tokens < 1:
        raise ConfigError(f"model.max_output_tokens must be positive or null, got {cfg.model.max_output_tokens}")
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
    try:  # also the model family's own limits (Gemini 2.5 Pro cannot think "none", …): before any request
        check_level(cfg.decoding.reasoning_effort)
        check_family(cfg.model.route if cfg.stage != "judge" else None, None, cfg.decoding.reasoning_effort)
    except ValueError as exc:
        raise ConfigError(f"decoding.reasoning_effort: {exc}") from None
    if cfg.stage != "judge" and cfg.model.send_temperature:
        _check_temperature("decoding.temperature", cfg.decoding.temperature, {"model": cfg.model.provider})
    if cfg.stage != "answer":
        _check_temperature("judge_panel.temperature", cfg.judge_panel.temperature,
                           {f"judge_panel.judges.{k}": j.provider for k, j in cfg.judge_panel.judges.items()
                            if j.send_temperature})
    _check_batch(cfg)
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


def batch_labels(cfg: WildtraceConfig) -> frozenset[str]:
    """The endpoints the run sends in batch: "model" and judge keys."""
    labels = {"model"} if cfg.model.batch and cfg.stage != "judge" else set()
    if cfg.stage != "answer":
        labels |= {k for k, j in cfg.judge_panel.judges.items() if j.batch or cfg.judge_panel.batch}
    return frozenset(labels)


def _check_batch(cfg: WildtraceConfig) -> None:
    labels = batch_labels(cfg)
    for label in sorted(labels):
        endpoint = cfg.model if label == "model" else cfg.judge_panel.judges[label]
        key = "model.batch" if label == "model" else (f"judge_panel.judges.{label}.batch"
                                                      if endpoint.batch else "judge_panel.batch")
        if provider_class(endpoint.provider).batch_api is None:
            raise ConfigError(f"{key}=true: provider {endpoint.provider!r} has no batch mode here "
                              f"(choose from {', '.join(batch_providers())}, or set {key}=false)")
        # Under a cap a batch item's worst case is reserved at the batch price (runtime/batch/spend.py):
        # without a batch_discount that price, and so the reservation, cannot be made.
        prefix = "model" if label == "model" else f"judge_panel.judges.{label}"
        caps = [k for k, v in (("budget.max_usd", cfg.budget.max_usd), (f"{prefix}.max_usd", endpoint.max_usd))
                if v is not None]
        if caps and endpoint.price.batch_discount is None:
            raise ConfigError(f"{key}=true with {' and '.join(caps)}: {prefix}.price.batch_discount is not set, so "
                              "a batched call's cost is unknown and a cap cannot hold over it (set it, e.g. 0.5, "
                              f"or unset the cap, or send {label}'s calls synchronously)")
    for name in ("poll_s", "max_wait_h"):
        value = getattr(cfg.batch, name)
        if not value > 0:
            raise ConfigError(f"batch.{name} must be positive, got {value}")


def to_settings(dict_cfg: Any) -> WildtraceConfig:
    """DictConfig → validated WildtraceConfig: the one conversion, at the entry point."""
    obj = OmegaConf.to_object(dict_cfg)
    if not isinstance(obj, WildtraceConfig):  # composed without the schema (should not happen)
        merged = OmegaConf.merge(OmegaConf.structured(WildtraceConfig), dict_cfg)
        obj = OmegaConf.to_object(merged)
    return validate(cast(WildtraceConfig, obj))  # merged onto the schema, to_object gives the schema's dataclass
