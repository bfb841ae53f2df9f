"""The run's plan, built once from the settings: what every entry point that sends (or prices) calls.

``build_plan(cfg)`` reads the data and decides everything the settings decide, in one place:
the stage's endpoints (each ``EndpointSpec`` made from its ``EndpointConfig`` here, each
provider built once), every task's caps decision, the samplings, the replicates, the answers
to judge (stage=judge), and every answer request. A document is read once for it: measured,
and, when in scope, turned into its answer request, encoded and hashed into its cache key in
the same pass (``PlannedAnswer``), so the survey (``pipeline.survey(plan, cache)``) looks the
answers up by key without reading a document again, and the pipeline sends nothing it must
read again for an answer the cache holds.

What needs the world (keys, the cache, the spend caps) comes after the survey, which says
which endpoints have calls to make: ``connect`` makes the endpoints then, from the plan's
providers. The retry rule is made from ``RetryConfig`` here too (``retry_policy``), for the
run, the check and the probe alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from wildtrace.config import ConfigError, EndpointConfig, ModelConfig, RetryConfig, WildtraceConfig, \
    effective_max_tokens
from wildtrace.core.caps import Caps, CapsDecision, decide
from wildtrace.core.prompts import answer_prompt
from wildtrace.core.tasks import Task
from wildtrace.providers.base import EndpointSpec, Provider, Sampling
from wildtrace.providers.registry import make_provider
from wildtrace.runtime.batch import BatchSettings
from wildtrace.runtime.spend.cap import Ledger
from wildtrace.runtime.store.cache import Cache
from wildtrace.runtime.store.dataset import Dataset, DocumentInfo, DocumentStep, load_dataset
from wildtrace.runtime.net.endpoint import Endpoint, local_transport, prepare_request
from wildtrace.runtime.run.prompt_cache import RepeatSchedule
from wildtrace.runtime.run.responses import load_responses
from wildtrace.runtime.net.retry import RetryPolicy
from wildtrace.runtime.net.served import ServedPolicy, policies


def sha256_text(text: str) -> str:
    """sha256 of a prompt's UTF-8 bytes, recorded so a prompt can be checked without storing it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def retry_policy(retry: RetryConfig) -> RetryPolicy:
    """The runtime's retry rule for the settings' ``retry`` (the one place the fields are copied)."""
    return RetryPolicy(max_retries=retry.max_retries, backoff_base_s=retry.backoff_base_s,
                       backoff_max_s=retry.backoff_max_s, retry_after_max_s=retry.retry_after_max_s)


def endpoint_spec(label: str, e: EndpointConfig) -> EndpointSpec:
    """An endpoint config (the model's or a judge's) as the spec the runtime calls (the one place it is made).

    Only the model has a budget field to choose and a documented output limit; a judge's budget is
    always ``max_tokens``.
    """
    model = e if isinstance(e, ModelConfig) else None
    return EndpointSpec(label=label, name=e.name, provider=e.provider, route=e.route, base_url=e.base_url,
                        api_key_env=e.api_key_env, max_concurrency=e.max_concurrency, timeout_s=e.timeout_s,
                        send_temperature=e.send_temperature, extra_body=e.extra_body, stream=e.stream,
                        max_call_s=e.max_call_s, reasoning_format=e.reasoning_format,
                        budget_field=model.budget_field if model else "max_tokens",
                        # the model's documented output limit: a budget rejection above it is resent at the
                        # limit (runtime/net/retry.next_step)
                        max_output_tokens=model.max_output_tokens if model else None,
                        max_output_tokens_source=model.max_output_tokens_source if model else None,
                        prompt_cache_key=e.prompt_cache_key, prompt_cache_retention=e.prompt_cache_retention)


def model_spec(cfg: WildtraceConfig) -> EndpointSpec:
    """The model under test as an endpoint."""
    return endpoint_spec("model", cfg.model)


def judge_specs(cfg: WildtraceConfig) -> list[EndpointSpec]:
    """The panel's judges as endpoints, in config order."""
    return [endpoint_spec(key, judge) for key, judge in cfg.judge_panel.judges.items()]


def stage_specs(cfg: WildtraceConfig) -> list[EndpointSpec]:
    """The endpoints the run's stage calls: the model (unless stage=judge), then the judges (unless stage=answer)."""
    return ([model_spec(cfg)] if cfg.stage != "judge" else []) + (judge_specs(cfg) if cfg.stage != "answer" else [])


def samplings(cfg: WildtraceConfig) -> tuple[Sampling, Sampling]:
    """(answer, judge) decoding settings as sent."""
    answer = Sampling(cfg.decoding.temperature, effective_max_tokens(cfg.model, cfg.decoding),
                      reasoning_effort=cfg.decoding.reasoning_effort)
    return answer, Sampling(cfg.judge_panel.temperature, cfg.judge_panel.max_tokens)


def make_endpoint(provider: Provider, key: str | None, retry: RetryPolicy, cache: Cache,
                  on_retry: Callable[[str], None], max_response_bytes: int = 64 << 20) -> Endpoint:
    """HTTP endpoint + cache for a provider. Offline providers get an in-process transport."""
    local = getattr(provider, "answer_locally", None)
    transport = local_transport(local) if local is not None else None
    return Endpoint(provider, key, retry, cache=cache, transport=transport, on_retry=on_retry,
                    max_response_bytes=max_response_bytes)


@dataclass(frozen=True)
class PlannedAnswer:
    """An in-scope task's answer request as the plan made it: its cache key and what the records need of it.

    The request's bytes are not kept (the release does not fit in memory at once): a task
    whose answer must be sent has its document read again when its turn comes.
    """

    key: str  #: the cache key of the request (``prepare_request``, as the call makes it)
    prompt_sha256: str  #: sha256 of the prompt's UTF-8 bytes (the record's ``prompt_sha256``)
    prompt_chars: int  #: the prompt's length in characters (pacing and the estimate)
    body_bytes: int  #: the encoded request's size (the spend cap's worst case)
    temperature_sent: bool | str  #: what the record says of temperature (``Provider.temperature_sent``)


@dataclass
class Plan:
    """Everything one run is decided by, resolved from the settings once (``build_plan``).

    ``model``, ``judges``, ``ledger`` and ``batch`` are the run's live parts, set by
    ``connect`` once the survey has said which keys are needed; a plan that only prices a
    run (the estimate) never has them.
    """

    dataset: Dataset
    specs: list[EndpointSpec]  #: the stage's endpoints: the model (unless stage=judge), then the judges
    providers: dict[str, Provider]  #: label → its provider, built once
    caps: Caps
    decisions: dict[str, CapsDecision]  #: question id → its caps decision (spec §3), made once
    answer_sampling: Sampling
    judge_sampling: Sampling
    answer_replicate: int
    judge_replicate: int
    retry: RetryPolicy
    #: The sweep's other points (sampling, replicate), each answer's repeats (docs/providers/cost.md).
    answer_siblings: list[tuple[Sampling, int]] = field(default_factory=list)
    #: When the answer prompts are sent again: the prompt-cache lifetime each asks for (prompt_cache.py).
    repeats: RepeatSchedule = field(default_factory=RepeatSchedule)
    answers: dict[str, PlannedAnswer] = field(default_factory=dict)  #: question id → its planned answer request
    given_answers: dict[str, dict] | None = None  #: stage=judge: rows read from responses=PATH
    max_response_bytes: int = 64 << 20
    grace_s: float = 10.0  #: after a stop, how long in-flight calls may finish
    served: dict[str, ServedPolicy] = field(default_factory=dict)  #: label → served-model rule
    model: Endpoint | None = None  #: None with stage=judge (and before ``connect``)
    judges: list[Endpoint] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)  #: prices, spend and caps (runtime/spend/cap.py)
    batch: BatchSettings | None = None  #: endpoints sent through the providers' batch APIs (runtime/batch)

    @property
    def model_provider(self) -> Provider | None:
        """The model's provider, or None with stage=judge."""
        return self.providers.get("model")

    @property
    def judge_providers(self) -> list[Provider]:
        """The judges' providers, in config order."""
        return [p for label, p in self.providers.items() if label != "model"]

    def connect(self, keys: Mapping[str, str], cache: Cache, on_retry: Callable[[str], None],
                ledger: Ledger | None = None, batch: BatchSettings | None = None) -> Plan:
        """The plan with its endpoints (the plan's providers, the keys read, the cache), ledger and batch."""
        endpoints = {label: make_endpoint(p, keys.get(p.spec.api_key_env or ""), self.retry, cache, on_retry,
                                          self.max_response_bytes) for label, p in self.providers.items()}
        return replace(self, model=endpoints.get("model"), judges=[e for label, e in endpoints.items()
                                                                    if label != "model"],
                       ledger=ledger or Ledger(), batch=batch)

    @property
    def endpoints(self) -> dict[str, Endpoint]:
        """label → endpoint, model first (empty before ``connect``)."""
        return {e.label: e for e in ([self.model] if self.model else []) + self.judges}


def given_responses(cfg: WildtraceConfig, dataset: Dataset) -> dict[str, dict] | None:
    """stage=judge: the earlier run's answers to judge (validate() has made sure responses is set)."""
    if cfg.stage != "judge":
        return None
    if cfg.responses is None:
        raise ConfigError("stage=judge needs responses=PATH (a responses.json, or a JSON list of rows)")
    return load_responses(cfg.responses, {t.question_id for t in dataset.tasks})


def _document_step(caps: Caps, model: Provider | None, sampling: Sampling, replicate: int,
                   decisions: dict[str, CapsDecision], planned: dict[str, PlannedAnswer]) -> DocumentStep:
    """The plan's part of the dataset's one read of a document: its caps decision, and each of its
    tasks' answer request, keyed (none out of context, none without a model: stage=judge)."""

    def plan_document(tasks: list[Task], info: DocumentInfo, text: str) -> None:
        decision = decide(info.chars, info.ideographs, caps)
        decisions.update((task.question_id, decision) for task in tasks)
        if model is None or not decision.in_scope:
            return  # never requested: no request to make
        for task in tasks:
            prompt = answer_prompt(task.question_text, text)
            request = model.build_request(prompt, sampling)
            ready = prepare_request(model, request, replicate)
            planned[task.question_id] = PlannedAnswer(ready.key, sha256_text(prompt), len(prompt), len(ready.content),
                                                      model.temperature_sent(request))

    return plan_document


def build_plan(cfg: WildtraceConfig) -> Plan:
    """The run's plan from its settings; DatasetError / ConfigError on bad input, before any request."""
    specs = stage_specs(cfg)
    providers = {s.label: make_provider(s) for s in specs}
    answer_sampling, judge_sampling = samplings(cfg)
    caps = cfg.model.caps
    found: dict[str, CapsDecision] = {}
    planned: dict[str, PlannedAnswer] = {}
    step = _document_step(caps, providers.get("model"), answer_sampling, cfg.decoding.replicate, found, planned)
    dataset = load_dataset(cfg.dataset.tasks, cfg.dataset.corpus, cfg.dataset.ids, cfg.dataset.limit, step)
    decisions = {t.question_id: found[t.question_id] for t in dataset.tasks}  # in task order
    return Plan(dataset=dataset, specs=specs, providers=providers, caps=caps, decisions=decisions,
                answer_sampling=answer_sampling, judge_sampling=judge_sampling,
                answer_replicate=cfg.decoding.replicate, judge_replicate=cfg.judge_panel.replicate,
                answer_siblings=[(Sampling(d.temperature, effective_max_tokens(cfg.model, d),
                                           reasoning_effort=d.reasoning_effort), d.replicate)
                                 for d in cfg.sweep_decodings],
                repeats=RepeatSchedule.of(cfg.prompt_repeats, cfg.model.batch),
                retry=retry_policy(cfg.retry), answers=planned, given_answers=given_responses(cfg, dataset),
                max_response_bytes=int(cfg.max_response_mb * (1 << 20)), grace_s=cfg.stop_grace_s,
                served=policies(cfg))

